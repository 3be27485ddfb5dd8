"""A task's transaction is staged on an object root and its machine is lost before the
driver decides the batch; the partition's next writer (an empty disk) holds it only as
another incarnation's staged object. The driver commits the batch, and before that
writer's next look seals it a byte of the staged object flips. The object was the only
copy of those rows (the WAL that held them went with the machine): exactly that
transaction's rows are lost, the writer names the object (``quiver.staged.damaged``),
every other row stays readable once, and the store keeps working (§10.2: a damaged
staged object is harmless while its writer lives; with its machine lost it loses
exactly its transaction's rows, named).

The object-root state space found this sequence (300 sequences of 60 steps): its
``flip_byte`` of a ``staged`` object takes every staged object for one whose writer
still holds the rows in its WAL and reports the lost machine's committed rows lost."""

from __future__ import annotations

import logging

import pytest

from tests.engine.state_model import COMMITTED, ObjectStoreHarness
from tests.engine.state_space_machine import ObjectStateSpace


def test_a_lost_machines_committed_staged_transaction_damaged_before_it_is_sealed_loses_only_its_rows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = ObjectStateSpace()
    try:
        state.start(flush="group", policy=None, time_retention=False, first_pair=0)
        h = state.h
        assert isinstance(h, ObjectStoreHarness)
        t = h.begin("p-0", "qb")
        h.txn_append(t, "base", 1)
        h.flush("p-0")  # durable, then staged as the sink stages it
        assert t.staged and t.state == "open"
        # its machine is lost; the next writer holds the staged object as foreign
        h.lose_machine("p-0", observer=False)
        assert h.writers["p-0"] is not None
        # the driver commits the batch; the writer's next look has not come yet
        h.commit("qb", h.candidates("qb"))
        assert t.state == "won" and all(h.status[k] == COMMITTED for k in t.keys)
        # a byte of that staged object (the only copy of its rows) flips, then every
        # handle is checked: its rows lost, named, every other row readable once
        with caplog.at_level(logging.ERROR, logger="quiver_spark"):
            state.flip_byte(kind="staged", index=0, frac=0.0)
        name = f"partitions/p-0/txns/{t.txn_id:020d}.txn"
        assert any(
            "quiver.staged.damaged" in r.getMessage() and name in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
    finally:
        state.teardown()
