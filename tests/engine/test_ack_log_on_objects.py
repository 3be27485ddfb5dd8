"""The ack log on an object root keeps the POSIX log's semantics (§13.4, §13.7): facts
commute, so the live state, a full replay of the deltas and CHECKPOINT + the deltas
above it agree; an append costs one LIST and one create; an idle refresh one LIST; an
open one GET, one LIST and one GET per delta since the checkpoint; a damaged delta is
named by its key and salvage skips it."""

from __future__ import annotations

import pytest

from quiver_spark.config import RetentionConfig
from quiver_spark.errors import ChecksumMismatchError, CorruptionError
from quiver_spark.objects import CountingObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects
from quiver_spark.retention import apply_retention
from quiver_spark.root_kind import root_kind
from quiver_spark.subscribers import Outcome, SubscriberRegistry, open_registry
from quiver_spark.subscribers import log as acklog
from quiver_spark.subscribers.journal import FileJournal
from quiver_spark.subscribers.objects_journal import (
    CHECKPOINT_KEY,
    DELTA_PREFIX,
    ObjectJournal,
    delta_key,
)
from tests.engine.subscriber_helpers import MemCatalog

P = "p-0"


def _open(bucket: str, objects=None, **kw) -> SubscriberRegistry:
    objects = objects if objects is not None else MemoryObjects(bucket, "store")
    return SubscriberRegistry.open(
        objects.url, objects=objects, journal=root_kind(objects.url).journal, **kw
    )


def _journal(r: SubscriberRegistry) -> ObjectJournal:
    assert isinstance(r.journal, ObjectJournal)
    return r.journal


def _deltas(m: MemoryObjects) -> list[str]:
    return [i.key for i in m.list(DELTA_PREFIX)]


def _workload(r: SubscriberRegistry, start: int, n: int) -> None:
    for i in range(start, start + n):
        sub = "a" if i % 3 else "b"
        part = f"p-{i % 4}"
        seq = i // 2 + 1 + (1 if i % 5 == 0 else 0)
        outcome = [Outcome.ACK, Outcome.ACK, Outcome.NACK, Outcome.DROPPED][i % 4]
        r.record(sub, part, [seq, seq + 2], outcome)
        if i % 37 == 0:
            r.condemn({part: [seq]})


def test_an_object_root_gets_the_object_journal_and_a_posix_one_the_files(bucket, tmp_path):
    reg = _open(bucket)
    assert isinstance(reg.journal, ObjectJournal)
    root = str(tmp_path)
    kind = root_kind(root)
    local = SubscriberRegistry.open(root, objects=LocalObjects(root), journal=kind.journal)
    assert isinstance(local.journal, FileJournal)
    assert (tmp_path / "subscribers" / "LOCK").exists()
    counted = CountingObjects(LocalObjects(str(tmp_path)))
    again = SubscriberRegistry.open(root, objects=counted, journal=kind.journal)
    assert isinstance(again.journal, FileJournal)


def test_a_read_never_creates_a_registry_on_an_object_root(bucket):
    m = MemoryObjects(bucket, "store")
    assert open_registry(m.url, journal=ObjectJournal, objects=m) is None
    assert m.snapshot() == {}
    reg = open_registry(m.url, journal=ObjectJournal, objects=m, create=True)
    assert reg is not None
    reg.register("a")
    again = open_registry(m.url, journal=ObjectJournal, objects=m)
    assert again is not None and again.subscribers() == ["a"]


def test_live_state_full_replay_and_checkpoint_plus_deltas_agree(bucket, tmp_path):
    m = MemoryObjects(bucket, "store")
    r = _open(bucket, m)
    _journal(r).checkpoint_deltas = 16
    r.register("a")
    r.register("b", start={"p-0": 3})
    _workload(r, 1, 150)
    live = r.state.digest()
    assert live["subscribers"]["a"] and live["deleted"]
    assert r.stats()["acklog"]["checkpoint_gen"] >= 16  # checkpoints were written
    # checkpoint + deltas above it
    assert _open(bucket).state.digest() == live
    # every delta from the first, without the checkpoint (nothing was deleted yet)
    assert _deltas(m)[0] == delta_key(1)
    m.delete(CHECKPOINT_KEY)
    assert _open(bucket).state.digest() == live
    # the same calls on a POSIX root give the same state
    posix = SubscriberRegistry.open(str(tmp_path))
    posix.register("a")
    posix.register("b", start={"p-0": 3})
    _workload(posix, 1, 150)
    assert posix.state.digest() == live


def test_refresh_sees_another_handles_facts_across_its_checkpoint(bucket):
    a, b = _open(bucket), _open(bucket)
    a.register("s")
    b.refresh()
    b.record("s", P, [1, 2], Outcome.ACK)
    a.refresh()
    assert a.hwm("s", P) == 2
    b.checkpoint()
    b.record("s", P, [3], Outcome.ACK)
    a.refresh()
    assert a.hwm("s", P) == 3 and a.state.digest() == b.state.digest()


def test_every_delta_is_a_complete_ack_log_file_with_its_number_and_a_token(bucket):
    m = MemoryObjects(bucket, "store")
    r = _open(bucket, m)
    r.register("a")
    r.record("a", P, [1, 2, 5], Outcome.ACK)
    tokens = set()
    for n in (1, 2):
        got = m.get(delta_key(n))
        assert got is not None
        gen, data, skipped = acklog.read_whole(delta_key(n), got.data)
        assert gen == n and data and not skipped
        assert len(got.data) == acklog.ACK_HEADER_SIZE + len(data)
        tokens.add(acklog.header_token(got.data))
    assert len(tokens) == 2 and 0 not in tokens


def test_an_ack_flush_with_nothing_new_is_one_list_and_one_create(bucket):
    m = MemoryObjects(bucket, "store")
    c = CountingObjects(m)
    r = _open(bucket, c)
    r.register("a")
    r.record("a", P, [1], Outcome.ACK)
    c.counts.clear()
    r.record_many("a", {P: [2, 3], "p-1": [1]}, Outcome.ACK)
    assert dict(c.counts) == {"list": 1, "create": 1}
    c.counts.clear()
    r.record("a", P, [2, 3], Outcome.ACK)  # already done: nothing to write
    assert dict(c.counts) == {"list": 1}


def test_an_idle_refresh_is_one_list(bucket):
    c = CountingObjects(MemoryObjects(bucket, "store"))
    r = _open(bucket, c)
    r.register("a")
    c.counts.clear()
    r.refresh()
    assert dict(c.counts) == {"list": 1}


def test_open_reads_the_checkpoint_one_listing_and_only_the_deltas_since(bucket):
    m = MemoryObjects(bucket, "store")
    w = _open(bucket, m)
    w.register("a")
    for i in range(1, 200):
        w.record("a", P, [i], Outcome.ACK)
    since = w.stats()["acklog"]["deltas_since_checkpoint"]
    assert 0 < since < _journal(w).checkpoint_deltas
    c = CountingObjects(m)
    r = _open(bucket, c)
    assert dict(c.counts) == {"get": 1 + since, "list": 1}
    assert r.hwm("a", P) == 199


def test_a_damaged_delta_is_named_by_its_key_and_salvage_skips_it(bucket):
    m = MemoryObjects(bucket, "store")
    r = _open(bucket, m)
    r.register("a", retained={P: []})  # names the partition in delta 1
    r.record("a", P, [1], Outcome.ACK)
    r.record("a", P, [2], Outcome.ACK)
    got = m.get(delta_key(2))
    assert got is not None
    raw = bytearray(got.data)
    raw[acklog.ACK_HEADER_SIZE + 16] ^= 0x04  # the seq of delta 2's ack
    m.put(delta_key(2), bytes(raw))
    with pytest.raises(ChecksumMismatchError) as err:
        _open(bucket)
    assert delta_key(2) in str(err.value)
    s = _open(bucket, salvage=True)
    assert s.report.salvaged == [(m.display(delta_key(2)), acklog.ACK_HEADER_SIZE)]
    # delta 2 (the ack of 1) skipped, delta 3 (the ack of 2) still counted
    assert s.is_done("a", P, 2) and not s.is_done("a", P, 1)


def test_a_missing_delta_below_later_ones_is_named(bucket):
    m = MemoryObjects(bucket, "store")
    r = _open(bucket, m)
    r.register("a")
    r.record("a", P, [1], Outcome.ACK)
    r.record("a", P, [2], Outcome.ACK)
    m.delete(delta_key(2))
    with pytest.raises(CorruptionError) as err:
        _open(bucket)
    assert delta_key(2) in str(err.value) and "missing" in str(err.value)
    assert _open(bucket, salvage=True).hwm("a", P) == 0


def test_a_retention_pass_on_an_object_root_records_dropped_and_deleted_once(bucket):
    reg = _open(bucket)
    cat = MemCatalog()
    for _ in range(3):
        cat.add(P)
    reg.register("a", retained=cat.retained())
    reg.record("a", P, [1, 2], Outcome.ACK)
    res = apply_retention(cat, reg, RetentionConfig(), now_ns=0)
    assert res.deleted == {P: [1, 2]} and cat.deleted == [(P, 1), (P, 2)]
    assert _open(bucket).deleted_marks(P).highest == 2


def test_a_failed_checkpoint_never_fails_the_append_and_is_retried_at_the_next(bucket):
    m = MemoryObjects(bucket, "store")
    reg = _open(bucket, m)
    r = _journal(reg)
    r.checkpoint_deltas = 4

    def refuse(op: str, key: str) -> None:
        if key == CHECKPOINT_KEY and op in ("create", "replace"):
            raise TimeoutError("checkpoint write timed out")

    m.faults.before = refuse
    reg.register("a")
    for seq in (1, 2, 3):
        reg.record("a", P, [seq], Outcome.ACK)  # delta 4: the checkpoint fails
    assert r.maintenance_error is not None and m.get(CHECKPOINT_KEY) is None
    m.faults.before = None
    reg.record("a", P, [4], Outcome.ACK)
    assert r.maintenance_error is None and reg.stats()["acklog"]["checkpoint_gen"] == 5
    assert _open(bucket).state.digest() == reg.state.digest()


def test_deltas_are_deleted_one_checkpoint_and_a_horizon_after_they_were_covered(bucket):
    m = MemoryObjects(bucket, "store")
    reg = _open(bucket, m)
    r = _journal(reg)
    t = [0.0]
    r.clock = lambda: t[0]
    r.checkpoint_deltas = 4
    reg.register("a")
    for seq in range(1, 11):  # deltas 2..11, checkpoints at 4 and 8
        reg.record("a", P, [seq], Outcome.ACK)
    assert _deltas(m)[0] == delta_key(1)  # within the horizon: nothing deleted
    t[0] += r.horizon_s
    for seq in range(11, 16):  # deltas 12..16: checkpoints at 12 and 16
        reg.record("a", P, [seq], Outcome.ACK)
    # 4 and 8 had been known for the horizon at checkpoint 12: <= 8 deleted; checkpoint
    # 12 is not (newest but one at 16, and known for less than the horizon)
    assert _deltas(m)[0] == delta_key(9) and _deltas(m)[-1] == delta_key(16)
    assert _open(bucket).state.digest() == reg.state.digest()
