"""The ack log and checkpoints: bit flips detected, torn tails cut, salvage (ARCHITECTURE.md §13.6)."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from quiver_spark.errors import CorruptionError
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscribers import log as acklog
from tests.damage import flip_bit, truncate_by
from tests.engine.subscriber_helpers import log_files, reopen_digest

P = "p-0"
FLIPS = 60


def _store(root: str, *, checkpoint: bool = False) -> dict:
    r = SubscriberRegistry.open(root, checkpoint_records=10**9)
    r.register("a")
    r.register("subscriber-with-a-long-name")
    for i in range(1, 13):
        r.record("a", P, [i], Outcome.ACK)
        r.record("subscriber-with-a-long-name", f"p-{i % 3}", [i, i + 40], Outcome.NACK)
    if checkpoint:
        r.checkpoint()
        r.record("a", P, [30], Outcome.DROPPED)
    digest = r.state.digest()
    r.close()
    return digest


def test_every_bit_flip_in_the_ack_log_is_detected_with_file_and_offset(tmp_path):
    base = str(tmp_path / "base")
    _store(base)
    (path,) = log_files(base)
    size = os.path.getsize(path)
    rng = random.Random(1)
    offsets = [*rng.sample(range(size), FLIPS - 1), size - 1]  # include the final record
    detected = 0
    for i, off in enumerate(offsets):
        root = str(tmp_path / f"f{i}")
        shutil.copytree(base, root)
        target = log_files(root)[0]
        flip_bit(target, off, rng.randrange(8))
        with pytest.raises(CorruptionError) as err:
            SubscriberRegistry.open(root)
        assert err.value.path == target
        rec_start = (off - acklog.ACK_HEADER_SIZE) // 32 * 32 + acklog.ACK_HEADER_SIZE
        assert err.value.offset == (0 if off < acklog.ACK_HEADER_SIZE else rec_start)
        assert f"{target}:{err.value.offset}" in str(err.value)
        detected += 1
    assert detected == FLIPS


def test_every_bit_flip_in_the_checkpoint_is_detected(tmp_path):
    base = str(tmp_path / "base")
    _store(base, checkpoint=True)
    ck = os.path.join(base, "subscribers", "CHECKPOINT")
    rng = random.Random(2)
    size = os.path.getsize(ck)
    offsets = rng.sample(range(size), min(FLIPS, size))
    for i, off in enumerate(offsets):
        root = str(tmp_path / f"c{i}")
        shutil.copytree(base, root)
        target = os.path.join(root, "subscribers", "CHECKPOINT")
        flip_bit(target, off, rng.randrange(8))
        with pytest.raises(CorruptionError) as err:
            SubscriberRegistry.open(root)
        assert err.value.path == target


def test_a_cut_at_every_byte_of_the_last_record_recovers_the_prefix(tmp_path):
    base = str(tmp_path / "base")
    r = SubscriberRegistry.open(base)
    r.register("a")
    r.record("a", P, [1], Outcome.ACK)
    before = r.state.digest()
    r.record("a", P, [2], Outcome.ACK)  # the record to tear
    r.close()
    (path,) = log_files(base)
    for cut in range(1, 33):
        root = str(tmp_path / f"t{cut}")
        shutil.copytree(base, root)
        truncate_by(log_files(root)[0], cut)
        again = SubscriberRegistry.open(root)
        assert again.state.digest() == before
        if cut < 32:  # a partial record: cut and reported
            assert again.report.torn[0][1:] == (os.path.getsize(path) - 32, 32 - cut)
        else:  # exactly one whole record removed: a clean shorter log
            assert again.report.torn == []
        again.record("a", P, [2], Outcome.ACK)  # appends after the cut
        again.close()
        assert reopen_digest(root)["subscribers"]["a"][P] == (2, (), ())


def test_a_torn_final_record_padded_with_zeros_is_cut_not_reported_as_corruption(tmp_path):
    root = str(tmp_path)
    r = SubscriberRegistry.open(root)
    r.register("a")
    r.record("a", P, [1], Outcome.ACK)
    before = r.state.digest()
    r.record("a", P, [2], Outcome.ACK)
    r.close()
    (path,) = log_files(root)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 20)
        f.write(b"\0" * 20)
    again = SubscriberRegistry.open(root)
    assert again.state.digest() == before and len(again.report.torn) == 1
    assert again.stats()["acklog"]["torn_bytes_cut"] == 32
    again.close()


def test_salvage_skips_a_corrupt_record_counts_it_and_keeps_the_rest(tmp_path):
    root = str(tmp_path)
    r = SubscriberRegistry.open(root)
    r.register("a")
    for i in (1, 2, 3):
        r.record("a", P, [i], Outcome.ACK)
    r.close()
    (path,) = log_files(root)
    bad = os.path.getsize(path) - 2 * 32  # the ack of 2
    flip_bit(path, bad + 10, 3)
    with pytest.raises(CorruptionError):
        SubscriberRegistry.open(root)
    s = SubscriberRegistry.open(root, salvage=True)
    assert s.report.salvaged == [(path, bad)]
    assert s.stats()["acklog"]["salvaged_records"] == 1
    assert s.hwm("a", P) == 1 and s.gaps("a", P) == {3}  # 2 lost: it will be redelivered
    s.close()


def test_a_corrupt_checkpoint_refuses_to_open_even_with_salvage(tmp_path):
    root = str(tmp_path)
    _store(root, checkpoint=True)
    flip_bit(os.path.join(root, "subscribers", "CHECKPOINT"), 20)
    for salvage in (False, True):
        with pytest.raises(CorruptionError, match="CHECKPOINT"):
            SubscriberRegistry.open(root, salvage=salvage)
