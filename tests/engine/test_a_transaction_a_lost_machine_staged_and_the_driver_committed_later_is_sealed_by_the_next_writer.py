"""A task's transaction is staged on an object root and its machine is lost before
the driver decides the batch: the partition's next writer (a new machine, an empty
disk) looks at the staged transaction, finds it undecided and looks again after 1 s,
2, 4... (§10.2). Once the driver commits the batch, that writer seals every row of it
at its next look, exactly once.

The state-space model lets time pass for those looks (``_foreign_due`` moves each next
look to now before a check): it once reached for an attribute the writer no longer had
and did nothing, so a check that came within a second of the writer's last look (a fast
step, or a slow one that ran the backoff up) found the committed rows not sealed yet
and reported them lost."""

from __future__ import annotations

from tests.engine.state_model import COMMITTED, ObjectStoreHarness
from tests.engine.state_space_machine import ObjectStateSpace


def test_a_lost_machines_transaction_committed_after_its_next_writer_looked_is_sealed_once():
    state = ObjectStateSpace()
    try:
        state.start(flush="group", policy="backpressure", time_retention=False, first_pair=0)
        h = state.h
        assert isinstance(h, ObjectStoreHarness)
        t = h.begin("p-0", "qb")
        h.txn_append(t, "base", 130)
        h.flush("p-0")  # durable, then staged as the sink stages it
        assert t.staged and t.state == "open"
        # its machine is lost; the next writer opens, looks at the staged transaction
        # (undecided: the next look is a second away) and the model checks
        h.lose_machine("p-0", observer=False)
        assert h.writers["p-0"] is not None
        book = h.writers["p-0"].writer.staged  # type: ignore[union-attr]
        assert t.txn_id in book.foreign
        # the driver decides the batch now, within that second
        h.commit("qb", h.candidates("qb"))
        assert t.state == "won" and all(h.status[k] == COMMITTED for k in t.keys)
        h.recover_and_check()  # every committed row readable, once
    finally:
        state.teardown()
