"""Ack semantics, registration, replay equivalence, refresh across instances."""

from __future__ import annotations

import os

import pytest

from quiver_spark.errors import InvalidNameError, SubscriberError, UnknownSegmentError
from quiver_spark.subscribers import Outcome, StartPosition, SubscriberRegistry
from quiver_spark.subscribers import log as acklog
from tests.engine.subscriber_helpers import copy_store, log_files, reopen_digest

P = "p-0"


@pytest.fixture
def reg(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path))
    r.register("a", retained={P: []})
    yield r
    r.close()


def test_out_of_order_acks_wait_in_the_gap_set_and_never_pass_a_hole(reg):
    reg.record("a", P, [3, 5], Outcome.ACK)
    assert reg.hwm("a", P) == 0
    assert reg.gaps("a", P) == {3, 5}
    reg.record("a", P, [1], Outcome.ACK)
    assert (reg.hwm("a", P), reg.gaps("a", P)) == (1, {3, 5})
    reg.record("a", P, [2], Outcome.ACK)
    assert (reg.hwm("a", P), reg.gaps("a", P)) == (3, {5})
    reg.record("a", P, [4], Outcome.ACK)
    assert (reg.hwm("a", P), reg.gaps("a", P)) == (5, frozenset())


def test_duplicate_ack_is_idempotent_and_writes_nothing(reg):
    reg.record("a", P, [1, 2], Outcome.ACK)
    before = reg.stats()["acklog"]["records_total"]
    reg.record("a", P, [2, 1, 1], Outcome.ACK)
    reg.record("a", P, [1], Outcome.DROPPED)
    assert reg.stats()["acklog"]["records_total"] == before
    assert reg.hwm("a", P) == 2


def test_ack_for_a_segment_that_never_existed_names_partition_seq_and_subscriber(reg):
    known = lambda p, s: 1 <= s <= 3  # noqa: E731
    with pytest.raises(UnknownSegmentError) as err:
        reg.record("a", P, [2, 9], Outcome.ACK, known=known)
    msg = str(err.value)
    assert "segment 9" in msg and repr(P) in msg and "'a'" in msg
    assert reg.hwm("a", P) == 0 and not reg.is_done("a", P, 2)  # nothing recorded
    with pytest.raises(UnknownSegmentError):
        reg.record("a", P, [0], Outcome.ACK)


def test_a_seq_deleted_after_everyone_acked_is_known_to_a_duplicate_ack(reg):
    reg.record("a", P, [1], Outcome.ACK)
    reg.condemn({P: [1]})
    reg.record("a", P, [1], Outcome.ACK, known=lambda p, s: False)  # done: no check
    assert reg.is_deleted(P, 1)


def test_unknown_subscriber_is_a_subscriber_error(reg):
    with pytest.raises(SubscriberError, match="unknown subscriber 'zz'"):
        reg.record("zz", P, [1], Outcome.ACK)


def test_nack_keeps_the_segment_pending_and_a_later_ack_completes_it(reg):
    reg.record("a", P, [1], Outcome.NACK)
    assert reg.nacked("a", P) == {1}
    assert reg.pending("a", P, [1, 2]) == [1, 2]
    assert not reg.done_by_all(P, 1)
    reg.record("a", P, [1], Outcome.ACK)
    assert reg.nacked("a", P) == frozenset() and reg.hwm("a", P) == 1
    reg.record("a", P, [1], Outcome.NACK)  # ack is final
    assert reg.is_done("a", P, 1) and reg.nacked("a", P) == frozenset()


def test_dropped_counts_as_done_for_the_mark(reg):
    reg.record("a", P, [2], Outcome.ACK)
    reg.record("a", P, [1], Outcome.DROPPED)
    assert reg.hwm("a", P) == 2 and reg.done_by_all(P, 1)


def test_start_positions_earliest_latest_and_explicit(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path))
    retained = {"p-0": [4, 5, 6], "p-1": [2]}
    r.register("e", start=StartPosition.EARLIEST, retained=retained)
    r.register("l", start=StartPosition.LATEST, retained=retained)
    r.register("x", start={"p-0": 5})
    assert [r.hwm("e", p) for p in ("p-0", "p-1", "p-9")] == [3, 1, 0]
    assert [r.hwm("l", p) for p in ("p-0", "p-1", "p-9")] == [6, 2, 0]
    assert [r.hwm("x", p) for p in ("p-0", "p-1")] == [5, 0]
    assert r.pending("e", "p-0", [4, 5, 6]) == [4, 5, 6]
    assert r.pending("l", "p-0", [4, 5, 6, 7]) == [7]
    assert reopen_digest(str(tmp_path)) == r.state.digest()
    r.close()


def test_registering_twice_fails_unless_exist_ok(reg):
    with pytest.raises(SubscriberError, match="already registered"):
        reg.register("a")
    reg.register("a", exist_ok=True)
    assert reg.subscribers() == ["a"]


def test_deregister_releases_pins_and_a_new_registration_starts_fresh(reg):
    reg.register("b", retained={P: [1, 2]})
    reg.record("a", P, [1, 2], Outcome.ACK)
    assert not reg.done_by_all(P, 1)
    reg.record("b", P, [2], Outcome.ACK)
    reg.deregister("b")
    assert reg.subscribers() == ["a"] and reg.done_by_all(P, 1)
    reg.register("b", retained={P: [1, 2]})
    assert reg.hwm("b", P) == 0 and reg.gaps("b", P) == frozenset()
    assert reopen_digest(reg.root) == reg.state.digest()
    with pytest.raises(SubscriberError):
        reg.deregister("nobody")


def test_done_by_all_is_false_with_no_subscribers(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path))
    assert not r.done_by_all(P, 1)
    r.close()


def test_names_that_reach_paths_are_validated(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path))
    for bad in ("", "../x", "a/b", "x" * 65, ".."):
        with pytest.raises(InvalidNameError):
            r.register(bad)
    r.register("ok")
    with pytest.raises(InvalidNameError):
        r.record("ok", "../p", [1], Outcome.ACK)
    r.close()


def _workload(r: SubscriberRegistry, start: int, n: int) -> None:
    for i in range(start, start + n):
        sub = "a" if i % 3 else "b"
        part = f"p-{i % 4}"
        seq = i // 2 + 1 + (1 if i % 5 == 0 else 0)
        outcome = [Outcome.ACK, Outcome.ACK, Outcome.NACK, Outcome.DROPPED][i % 4]
        r.record(sub, part, [seq, seq + 2], outcome)


def test_checkpoint_plus_tail_replay_equals_full_replay_equals_live_state(tmp_path):
    full = str(tmp_path / "full")
    r = SubscriberRegistry.open(full, checkpoint_records=10**9)
    r.register("a")
    r.register("b", start={"p-0": 3})
    _workload(r, 1, 120)
    ck = copy_store(full, str(tmp_path / "ck"))
    _workload(r, 121, 80)
    live = r.state.digest()
    r.close()

    c = SubscriberRegistry.open(ck, checkpoint_records=10**9)
    c.checkpoint()
    assert len(log_files(ck)) == 1
    _workload(c, 121, 80)
    assert c.stats()["acklog"]["records_since_checkpoint"] > 0
    c.close()
    assert reopen_digest(full) == live
    assert reopen_digest(ck) == live
    assert live["subscribers"]["a"]  # the workload did something


def test_automatic_checkpoint_rotates_and_removes_covered_logs(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path), checkpoint_records=10)
    r.register("a")
    for i in range(1, 40):
        r.record("a", P, [i], Outcome.ACK)
    assert r.stats()["acklog"]["checkpoint_gen"] >= 3
    assert len(log_files(str(tmp_path))) == 1
    assert r.stats()["acklog"]["records_since_checkpoint"] < 10
    assert reopen_digest(str(tmp_path)) == r.state.digest()
    assert r.hwm("a", P) == 39
    r.close()


def test_refresh_sees_another_instances_acks_and_survives_its_compaction(tmp_path):
    a = SubscriberRegistry.open(str(tmp_path), checkpoint_records=10**9)
    b = SubscriberRegistry.open(str(tmp_path), checkpoint_records=10**9)
    a.register("s")
    b.refresh()
    b.record("s", P, [1, 2], Outcome.ACK)
    a.refresh()
    assert a.hwm("s", P) == 2
    b.checkpoint()
    b.record("s", P, [3], Outcome.ACK)
    a.refresh()  # a's log file was compacted away: reload checkpoint, read new tail
    assert a.hwm("s", P) == 3 and a.state.digest() == b.state.digest()
    a.close()
    b.close()


def test_next_segments_claims_and_a_nack_makes_the_segment_deliverable_again(reg):
    assert reg.next_segments("a", P, [1, 2, 3], limit=2) == [1, 2]
    assert reg.next_segments("a", P, [1, 2, 3]) == [3]
    reg.record("a", P, [1], Outcome.ACK)
    reg.record("a", P, [2], Outcome.NACK)
    assert reg.next_segments("a", P, [1, 2, 3]) == [2]
    reg.release("a", P, [3])
    assert reg.next_segments("a", P, [1, 2, 3]) == [3]


def test_vectorised_and_struct_decoders_agree(monkeypatch):
    enc = acklog.RecordEncoder(0)
    enc.add_name(acklog.NS_SUBSCRIBER, 1, "sub-with-a-long-name-over-twenty-chars")
    enc.add_name(acklog.NS_PARTITION, 7, "p-0")
    for i in range(3000):
        enc.add(
            acklog.K_OUTCOME,
            (1, 2, 3)[i % 3],
            sub=1 + i % 2,
            part=7,
            a=3000 - i,
            b=1 + (i % 7 == 0),
        )
    enc.add(acklog.K_DELETED, part=7, a=1, b=4)
    data = enc.data()
    vec = acklog.decode_records(data)
    monkeypatch.setattr(acklog, "VECTOR_MIN_RECORDS", 10**9)
    small = acklog.decode_records(data)
    assert vec.names == small.names and vec.nacks == small.nacks
    assert vec.deleted == small.deleted

    def norm(f):
        return sorted(
            (g.sub, g.part, sorted(zip(g.firsts, g.counts or [1] * len(g.firsts), strict=True)))
            for g in f.done
        )

    assert norm(vec) == norm(small)


def test_open_report_counts_records_and_files(tmp_path):
    r = SubscriberRegistry.open(str(tmp_path))
    r.register("a")
    r.record("a", P, [1, 2, 4], Outcome.ACK)
    r.close()
    again = SubscriberRegistry.open(str(tmp_path))
    assert again.report.records_replayed == r.stats()["acklog"]["records_total"]
    assert again.report.torn == [] and again.report.salvaged == []
    assert os.path.exists(os.path.join(str(tmp_path), "subscribers", "LOCK"))
    again.close()
