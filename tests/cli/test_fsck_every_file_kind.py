"""Damage to any one file kind is contained as ARCHITECTURE.md "Damage and what it
affects" says, and ``quiver fsck`` reports it there.

For every file kind of the store, one copy of a small store gets that file damaged
(one byte flipped; the high bit of a byte for text files) and another gets it
deleted. Then, in this order: ``quiver fsck``, ``quiver status`` and ``quiver gc``
(before anything repairs the damage), then a writer of the damaged partition and a
consumer in a new process. Each outcome is checked against the table's row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from quiver_spark import QuiverStore
from quiver_spark.dataloss import LostLog
from quiver_spark.subscribers import SubscriberRegistry
from quiver_spark.subscription import Subscription
from quiver_spark.subscription.position import Position
from tests.damage import flip_bit, flip_byte

from .conftest import CFG, batch, run, write_segments

OK = "ok"


@dataclass(frozen=True)
class Row:
    """What one damaged or missing file leads to."""

    file: str  # path under the root; a glob picks the last match
    fsck: tuple[int, str, str] | tuple[int, None, None]  # exit, "problem"/"warning", kind
    status: int = 0
    gc: int = 0
    writer: str = OK  # OK, or a fragment of its one-line error
    consumer: str = OK
    also: tuple[tuple[str, str], ...] = ()  # further findings the same damage causes


WAL = "partitions/p-0/wal/*.wal"
ARROW = "segments/p-0/00000000000000000004.arrow"
NONE = (0, None, None)

FLIPPED: dict[str, Row] = {
    "STORE": Row("STORE", (1, "problem", "store"), 1, 1, "STORE:0", "STORE:0"),
    "POLICY": Row("POLICY", (1, "problem", "policy")),
    "POLICY.copy": Row("POLICY.copy", (0, "warning", "policy_copy")),
    "STATE": Row("partitions/p-0/STATE", (1, "problem", "state"), gc=1, writer="STATE:0"),
    "HEARTBEAT": Row("partitions/p-0/HEARTBEAT", (0, "warning", "heartbeat")),
    "LOCK": Row("partitions/p-0/LOCK", (0, "warning", "lock")),
    "WAL": Row(WAL, (1, "problem", "wal"), gc=1, writer="crc mismatch"),
    ".arrow": Row(ARROW, (1, "problem", "segment"), consumer="is corrupt"),
    # status reads the partition's MANIFEST, not every .meta: fsck and the reader name it
    ".meta": Row(ARROW[:-6] + ".meta", (1, "problem", "segment_meta"), consumer="is corrupt"),
    "QUARANTINE": Row("segments/QUARANTINE", (0, "warning", "quarantine_mark")),
    # readers list the partition instead; the writer rewrites it
    "MANIFEST": Row("partitions/p-0/MANIFEST", (1, "problem", "manifest")),
    "ack log": Row(
        "subscribers/ack-*.log", (1, "problem", "subscribers"), 1, 1, consumer="ack log"
    ),
    "CHECKPOINT": Row(
        "subscribers/CHECKPOINT", (1, "problem", "subscribers"), 1, 1, consumer="CHECKPOINT"
    ),
    ".sub": Row("subscribers/records/a.sub", (0, "warning", "subscriber_record")),
    "commit": Row("commits/q/*.commit", (1, "problem", "commit")),
    "readers/<subscriber>.lock": Row("readers/a.lock", (0, "warning", "reader_lock")),
    "readers/<subscriber>.lost.jsonl": Row("readers/a.lost.jsonl", (0, "warning", "lost_log")),
    "metrics": Row("metrics/consumer-a.prom", (0, "warning", "metrics")),
}

DELETED: dict[str, Row] = {
    # the commands refuse a directory without STORE; a writer creates a new one
    "STORE": Row("STORE", (2, None, None), 2, 2),
    "POLICY": Row("POLICY", (1, "problem", "policy")),
    "POLICY.copy": Row("POLICY.copy", (0, "warning", "policy_copy")),
    "STATE": Row("partitions/p-0/STATE", (0, "warning", "state")),
    "HEARTBEAT": Row("partitions/p-0/HEARTBEAT", NONE),
    "LOCK": Row("partitions/p-0/LOCK", NONE),
    "WAL": Row(WAL, NONE),  # its rows are gone without a trace: see the table
    ".arrow": Row(ARROW, (1, "problem", "segment"), consumer="is missing"),
    ".meta": Row(ARROW[:-6] + ".meta", (1, "problem", "segment_meta"), consumer="is missing"),
    "QUARANTINE": Row("segments/QUARANTINE", (0, "warning", "quarantine_mark")),
    # the next reader or writer writes it again from a listing
    "MANIFEST": Row("partitions/p-0/MANIFEST", (0, "warning", "manifest")),
    "ack log": Row("subscribers/ack-*.log", (1, "problem", "subscribers")),
    # acknowledgements before the checkpoint are gone: a's acknowledged (and since
    # quarantined) segment is delivered again, and failOnDataLoss fails on it; so is its
    # registration, which a's subscription record outlives (its data is kept, named)
    "CHECKPOINT": Row(
        "subscribers/CHECKPOINT",
        (1, "problem", "subscribers"),
        consumer="is quarantined",
        also=(("problem", "subscribers"),),
    ),
    ".sub": Row("subscribers/records/a.sub", NONE),
    "commit": Row("commits/q/*.commit", NONE),
    "readers/<subscriber>.lock": Row("readers/a.lock", NONE),
    "readers/<subscriber>.lost.jsonl": Row("readers/a.lost.jsonl", NONE),
    "metrics": Row("metrics/consumer-a.prom", NONE),
}

TEXT = (".lock", ".jsonl", ".prom", "LOCK")
BINARY_MIDDLE = (".wal", ".arrow")

WRITE_AND_CONSUME = """
import json, os, sys
from quiver_spark import QuiverStore
from quiver_spark.subscription import Subscription
from tests.cli.conftest import CFG, batch

def first_line(e):
    return f"{type(e).__name__}: {e}".splitlines()[0]

out = {}
try:
    with QuiverStore.open(root, CFG, partition="p-0", background=False) as s:
        s.append(batch(1000, 5))
        s.finalize()
    out["writer"] = "ok"
except Exception as e:
    out["writer"] = first_line(e)
try:
    with Subscription.open(root, "a") as sub:
        while (b := sub.poll()) is not None:
            for m in b.segments:
                for _ in sub.read(m):
                    pass
            sub.ack(b.end)
    out["consumer"] = "ok"
except Exception as e:
    out["consumer"] = first_line(e)
print(json.dumps(out))
"""

KILLED_WRITER = """
import os
from quiver_spark import QuiverStore
from tests.cli.conftest import CFG, batch
s = QuiverStore.open(root, CFG, partition="p-0", background=False)
s.append(batch(500, 5))
s.append(batch(505, 5))
s.flush()
s.writer.write_heartbeat()
os._exit(0)   # killed: two records live only in the WAL
"""


def python(code: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"root = {str(root)!r}\n{code}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every file kind present: p-0 (segments 1-4, the 4th by a transaction, two
    records left in its WAL by a killed writer), p-1 (3 segments, the 1st quarantined),
    subscriber a (acknowledged p-0 1-2 and all of p-1, a checkpoint between two
    acknowledgements, one line in its lost log), subscriber b (nothing acknowledged)."""
    root = tmp_path_factory.mktemp("kinds") / "store"
    write_segments(root, "p-0", 3)
    with QuiverStore.open(str(root), CFG, partition="p-0", background=False) as s:
        txn = s.begin_txn("q", 0)
        s.append(batch(300, 10), txn_id=txn)
        s.flush()
        s.commit_txn("q", 0, [("p-0", txn)], 10)
        s.finalize()
    write_segments(root, "p-1", 3)
    with SubscriberRegistry.open(str(root)) as reg:
        reg.register("b")
    with Subscription.open(str(root), "a") as sub:
        sub.start()
        sub.ack(Position({"p-0": 1, "p-1": 3}))
    with SubscriberRegistry.open(str(root)) as reg:
        reg.checkpoint()
    with Subscription.open(str(root), "a") as sub:
        sub.start()
        sub.ack(Position({"p-0": 2, "p-1": 3}))
    LostLog(str(root), "a").record("p-1", 1, "quarantined", skipped=False, evidence=None)
    LostLog(str(root), "a").record("p-1", 1, "quarantined", skipped=False, evidence=None)
    with QuiverStore.open(str(root), CFG, partition=None, background=False) as s:
        s.segment_location.quarantine("p-1", 1, "moved aside by the test")
    done = python(KILLED_WRITER, root)
    assert done.returncode == 0, done.stderr
    return root


def target(root: Path, pattern: str) -> Path:
    found = sorted(root.glob(pattern))
    assert found, f"{pattern} missing from the test store"
    return found[-1]


def damage(path: Path, delete: bool) -> None:
    if delete:
        path.unlink()
    elif path.name.endswith(TEXT):
        flip_bit(path, os.path.getsize(path) // 2, 7)  # no longer UTF-8
    elif path.suffix in BINARY_MIDDLE:
        flip_byte(path, 40 if path.suffix == ".wal" else os.path.getsize(path) // 2)
    elif path.name.startswith("ack-"):
        flip_byte(path, 8)  # its header
    else:
        flip_byte(path, 20)  # a §6 frame's body


def check(store: Path, tmp_path: Path, row: Row, delete: bool) -> None:
    root = tmp_path / "store"
    shutil.copytree(store, root)
    path = target(root, row.file)
    damage(path, delete)

    fsck = run(["fsck", root, "--json"])
    code, level, kind = row.fsck
    assert fsck.exit_code == code, fsck.output + fsck.stderr
    if code != 2:
        doc = json.loads(fsck.stdout)
        found = [(lvl, f["kind"], f["file"]) for lvl in ("problem", "warning")
                 for f in doc[lvl + "s"]]  # fmt: skip
        expected = [] if level is None else [(level, kind), *row.also]
        assert [(lvl, k) for lvl, k, _ in found] == expected, found
        if level is not None:
            assert str(path) in found[0][2] or found[0][2].startswith(str(root / "segments"))
    status = run(["status", root])
    assert status.exit_code == row.status, status.output + status.stderr
    gc = run(["gc", root])
    assert gc.exit_code == row.gc, gc.output + gc.stderr

    out = python(WRITE_AND_CONSUME, root)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    for who, want in (("writer", row.writer), ("consumer", row.consumer)):
        if want == OK:
            assert seen[who] == OK, (who, seen[who])
        else:
            assert want in seen[who], (who, seen[who])


@pytest.mark.parametrize("kind", sorted(FLIPPED))
def test_a_flipped_byte_in_each_file_kind_is_contained_as_its_row_says(
    store: Path, tmp_path: Path, kind: str
) -> None:
    check(store, tmp_path, FLIPPED[kind], delete=False)


@pytest.mark.parametrize("kind", sorted(DELETED))
def test_a_deleted_file_of_each_kind_is_contained_as_its_row_says(
    store: Path, tmp_path: Path, kind: str
) -> None:
    check(store, tmp_path, DELETED[kind], delete=True)


def test_every_file_kind_of_the_store_has_a_row() -> None:
    assert sorted(FLIPPED) == sorted(DELETED)
    text = (Path(__file__).resolve().parents[2] / "ARCHITECTURE.md").read_text()
    section = text[text.index("Damage and what it affects") :]
    for kind in FLIPPED:
        assert f"| {kind} " in section or f"| `{kind}`" in section, kind
