"""``quiver fsck`` on a store whose root is an object store names damage to every
object kind as ARCHITECTURE.md "Damage and what it affects" says: a flipped byte in
MANIFEST, LEASE, an ack-log delta or CHECKPOINT is a problem of its own kind
(``manifest``, ``lease``, ``acklog``), damage to an advisory object a warning, and a
released lease only a note.

The store lives in the in-process ``memory://`` object store, so the CLI runs
in-process here (tests/cli/test_commands_on_object_roots.py runs it as a
subprocess against an S3 endpoint).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects.memory import MemoryObjects, reset_memory
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position

from .conftest import batch, run

BUCKET = "kinds"
_copies = itertools.count()

FLIPPED: dict[str, tuple[str, str]] = {
    "STORE": ("problem", "store"),
    "POLICY": ("problem", "policy"),
    "POLICY.copy": ("warning", "policy_copy"),
    "partitions/p-0/MANIFEST": ("problem", "manifest"),
    "partitions/p-0/LEASE": ("problem", "lease"),
    "partitions/p-0/GONE": ("warning", "gone"),
    "partitions/p-0/txns/*.txn": ("problem", "staged"),
    "segments/p-0/00000000000000000004.arrow": ("problem", "segment"),
    "segments/p-0/00000000000000000004.meta": ("problem", "segment_meta"),
    "segments/QUARANTINE": ("warning", "quarantine_mark"),
    "subscribers/CHECKPOINT": ("problem", "acklog"),
    "subscribers/log/*.ack": ("problem", "acklog"),
    "subscribers/records/a.sub": ("warning", "subscriber_record"),
    "commits/q/*.commit": ("problem", "commit"),
    "readers/a.lease": ("problem", "lease"),
    "readers/a.lost.jsonl": ("warning", "lost_log"),
    "metrics/consumer-a.prom": ("warning", "metrics"),
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every object kind present under ``memory://kinds/src``: p-0 (segments 3-4,
    the 4th by a transaction; 1 quarantined, 2 reclaimed; one staged transaction), subscriber a (acknowledged through 2,
    with a checkpoint between two acknowledgements and one lost-log line)."""
    reset_memory()
    url = f"memory://{BUCKET}/src"
    wal = tmp_path_factory.mktemp("wal")
    cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=600), wal=WalConfig(path=str(wal)))
    with QuiverStore.open(url, cfg, partition="p-0", background=False) as s:
        with Subscription.open(url, "a") as sub:
            sub.start()
            for i in range(3):
                s.append(batch(i * 10, 10))
                s.finalize()
            txn = s.begin_txn("q", 0)
            s.append(batch(300, 10), txn_id=txn)
            s.flush()
            s.commit_txn("q", 0, [("p-0", txn)], 10)
            s.finalize()
            undecided = s.begin_txn("q", 1)  # staged, its batch not decided yet
            s.append(batch(400, 5), txn_id=undecided)
            s.flush()
            s.stage_txn(undecided)
            sub.ack(Position({"p-0": 1}))
            sub.lost.record("p-0", 1, "quarantined", skipped=False, evidence=None)
        s.subscribers.checkpoint()
        with Subscription.open(url, "a") as sub:
            sub.start()
            sub.ack(Position({"p-0": 2}))
        s.segment_location.quarantine("p-0", 1, "moved aside by the test")  # the mark
    yield url
    reset_memory()


def copy_of(source: str) -> tuple[str, MemoryObjects]:
    """A fresh copy of the source store (its own prefix in the bucket)."""
    prefix = f"c{next(_copies)}"
    src, dst = MemoryObjects(BUCKET, "src"), MemoryObjects(BUCKET, prefix)
    for info in src.list(""):
        got = src.get(info.key)
        assert got is not None
        dst.put(info.key, got.data)
    return f"memory://{BUCKET}/{prefix}", dst


def one_key(objects: MemoryObjects, pattern: str) -> str:
    if "*" not in pattern:
        assert objects.head(pattern) is not None, f"{pattern} missing from the test store"
        return pattern
    head, tail = pattern.split("*")
    found = [i.key for i in objects.list(head) if i.key.endswith(tail)]
    assert found, f"{pattern} missing from the test store"
    return found[-1]


def flip(objects: MemoryObjects, key: str) -> None:
    got = objects.get(key)
    assert got is not None
    data = bytearray(got.data)
    if key.endswith((".jsonl", ".prom")):
        data[len(data) // 2] ^= 0x80  # no longer UTF-8
    elif key.endswith(".arrow"):
        data[len(data) // 2] ^= 0xFF
    elif key.endswith(".ack"):
        data[8] ^= 0xFF  # its header
    else:
        data[20] ^= 0xFF  # a §6 frame's body
    objects.put(key, bytes(data))


def fsck(url: str, wal: Path) -> tuple[int, dict[str, Any]]:
    res = run(["fsck", url, "--wal-path", wal, "--json"])
    assert res.exit_code in (0, 1), res.output + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return res.exit_code, doc


def findings(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(lvl, f["kind"], f["file"]) for lvl in ("problem", "warning") for f in doc[lvl + "s"]]


def test_the_undamaged_object_store_is_healthy_and_its_released_leases_are_only_noted(
    source: str, tmp_path: Path
) -> None:
    url, _ = copy_of(source)
    code, doc = fsck(url, tmp_path)
    assert code == 0 and findings(doc) == [], findings(doc)
    notes = [(n["kind"], n["file"].removeprefix(url + "/")) for n in doc["notes"]]
    assert ("lease", "partitions/p-0/LEASE") in notes
    assert ("lease", "readers/a.lease") in notes
    assert any(kind == "wal" for kind, _ in notes)  # what it cannot see, said
    assert doc["checked"]["manifests"] == 1 and doc["checked"]["leases"] == 2
    assert doc["checked"]["segments"] == 2 and doc["checked"]["commits"] == 1
    assert doc["checked"]["staged"] == 1


@pytest.mark.parametrize("pattern", sorted(FLIPPED))
def test_a_flipped_byte_in_each_object_kind_is_named_with_its_kind(
    source: str, tmp_path: Path, pattern: str
) -> None:
    url, objects = copy_of(source)
    key = one_key(objects, pattern)
    flip(objects, key)
    code, doc = fsck(url, tmp_path)
    level, kind = FLIPPED[pattern]
    found = findings(doc)
    assert [(lvl, k) for lvl, k, _ in found] == [(level, kind)], found
    assert found[0][2] == f"{url}/{key}"
    assert code == (1 if level == "problem" else 0)


def test_a_manifest_entry_whose_segment_is_gone_is_a_manifest_problem(
    source: str, tmp_path: Path
) -> None:
    url, objects = copy_of(source)
    objects.delete("segments/p-0/00000000000000000003.meta")
    objects.delete("segments/p-0/00000000000000000003.arrow")
    code, doc = fsck(url, tmp_path)
    assert code == 1
    assert [(f["kind"], f["seq"]) for f in doc["problems"]] == [("manifest", 3)]
    assert "lists segment 3, whose .meta is missing" in doc["problems"][0]["reason"]


def test_a_published_segment_the_manifest_lacks_is_a_manifest_problem(
    source: str, tmp_path: Path
) -> None:
    url, objects = copy_of(source)
    for suffix in (".meta", ".arrow"):  # segment 2 again, published beside the manifest
        got = objects.get(f"segments/p-0/00000000000000000004{suffix}")
        assert got is not None
        objects.put(f"segments/p-0/00000000000000000009{suffix}", got.data)
    code, doc = fsck(url, tmp_path)
    manifest = [f for f in doc["problems"] if f["kind"] == "manifest"]
    assert code == 1 and [f["seq"] for f in manifest] == [9]
    assert "new readers do not see it" in manifest[0]["reason"]


def test_a_missing_ack_delta_above_the_checkpoint_is_an_acklog_problem(
    source: str, tmp_path: Path
) -> None:
    url, objects = copy_of(source)
    deltas = [i.key for i in objects.list("subscribers/log/")]
    ckpt_gen = 0
    got = objects.get("subscribers/CHECKPOINT")
    assert got is not None
    from quiver_spark import format as fmt

    ckpt_gen = int(fmt.decode_frame("CHECKPOINT", fmt.MAGIC_CHECKPOINT, got.data)["log_gen"])
    above = [k for k in deltas if int(k.rsplit("/", 1)[1][:20]) > ckpt_gen]
    assert len(above) >= 2, deltas
    objects.delete(above[0])
    code, doc = fsck(url, tmp_path)
    assert code == 1
    assert [(f["kind"], f["file"]) for f in doc["problems"]] == [("acklog", f"{url}/{above[0]}")]
    assert "missing" in doc["problems"][0]["reason"]


def test_quarantine_moves_a_corrupt_segment_aside_on_an_object_root(tmp_path: Path) -> None:
    url = "memory://quarantine/s"
    cfg = StoreConfig(wal=WalConfig(path=str(tmp_path / "wal")))
    with QuiverStore.open(url, cfg, partition="p-0", background=False) as s:
        for i in range(2):
            s.append(batch(i * 10, 10))
            s.finalize()
    objects = MemoryObjects("quarantine", "s")
    flip(objects, "segments/p-0/00000000000000000002.arrow")
    res = run(["fsck", url, "--wal-path", tmp_path / "wal", "--quarantine", "--json"])
    assert res.exit_code == 1, res.output + res.stderr
    doc = json.loads(res.stdout)
    assert doc["quarantined"] == 1, doc["problems"]
    assert doc["problems"][0]["action"].startswith("quarantined to ")
    again = run(["fsck", url, "--wal-path", tmp_path / "wal"])
    assert again.exit_code == 0, again.output
    assert objects.head("segments/p-0/00000000000000000002.meta") is None
