"""The store's promises when a process dies at the worst moment, as a user meets them.

Every test is a scenario run with real processes: a writer, committer or retention
pass runs as a child process (``integration/scenarios/steps.py``, public engine
API) and is killed with SIGKILL, or ends with ``os._exit``, at the moment the
scenario names; then the store is used as a user would: reopened with
``QuiverStore.open``, through the ``quiver`` command line, or read by a Spark query.
Assertions are on exact row sets: every acknowledged or committed row present
exactly once, nothing else.

Spark scenarios share one local SparkSession (the one ``tests/spark`` made, when
the same pytest run already started it).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscribers import Outcome
from tests.damage import flip_byte
from tests.spark.source_helpers import Collector, stream
from tests.spark_session import local_session

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

REPO = Path(__file__).resolve().parents[1]
QUIVER = str(Path(sys.executable).parent / "quiver")
STEP_TIMEOUT_S = 120.0


# -- child processes -------------------------------------------------------------------------


class Child:
    """One step of ``integration/scenarios/steps.py`` in a process of its own."""

    def __init__(self, scratch: Path, step: str, args: dict[str, Any]) -> None:
        self.step = step
        self.stderr_path = scratch / f"{step}-{time.monotonic_ns()}.stderr"
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "integration.scenarios.steps", step, json.dumps(args)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )

    def _stderr(self) -> str:
        try:
            return self.stderr_path.read_text()[-4000:]
        except OSError:
            return ""

    def next_event(self, timeout_s: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill9()
                raise AssertionError(
                    f"step {self.step}: no report within {timeout_s}s\n{self._stderr()}"
                )
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait(30)
                raise AssertionError(
                    f"step {self.step} exited with {code} before reporting\n{self._stderr()}"
                )
            if line.startswith("{"):
                return dict(json.loads(line))

    def ready(self) -> dict[str, Any]:
        """Wait until the step reached its kill point."""
        ev = self.next_event()
        assert ev["event"] == "ready", (
            f"step {self.step} reported {ev} instead of reaching its kill point"
        )
        return ev

    def done(self) -> dict[str, Any]:
        """Wait until the step finished by itself; it must exit with 0."""
        ev = self.next_event()
        assert ev["event"] == "done", f"step {self.step}: expected done, got {ev}"
        code = self.proc.wait(STEP_TIMEOUT_S)
        assert code == 0, f"step {self.step} exited with {code}\n{self._stderr()}"
        return ev

    def outcome(self) -> dict[str, Any]:
        """``ready`` or ``done``, whichever the step reports (a kill it does itself)."""
        ev = self.next_event()
        self.proc.wait(STEP_TIMEOUT_S)
        return ev

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Any]:
    """``child(step, **args)`` starts a step; every step still running is killed after."""
    started: list[Child] = []

    def start(step: str, **args: Any) -> Child:
        c = Child(tmp_path, step, args)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill9()


def quiver(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``quiver`` console script of the project's venv."""
    return subprocess.run(
        [QUIVER, *map(str, args)], capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
        cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"{r.args} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


# -- reading as a user ---------------------------------------------------------------------------


def seg_dir(root: Path, partition: str = "p-0", segments: Path | None = None) -> Path:
    return (segments or root / "segments") / partition


def published(root: Path, partition: str = "p-0", segments: Path | None = None) -> list[int]:
    """Seqs whose ``.meta`` exists (the published segments), from a directory listing."""
    d = seg_dir(root, partition, segments)
    if not d.is_dir():
        return []
    return sorted(int(n.name.split(".")[0]) for n in d.iterdir() if n.name.endswith(".meta"))


def meta_path(root: Path, seq: int, partition: str = "p-0") -> Path:
    return seg_dir(root, partition) / f"{seq:020d}.meta"


def arrow_path(root: Path, seq: int, partition: str = "p-0") -> Path:
    return seg_dir(root, partition) / f"{seq:020d}.arrow"


def read_keys(root: Path, config: StoreConfig | None = None) -> list[int]:
    """Every retained key (duplicates kept), through a read handle, sorted."""
    with QuiverStore.open(str(root), config, partition=None, create=False, background=False) as s:
        return sorted(k for b in s.scan() for k in b.column("k").to_pylist())


def segment_keys(root: Path, partition: str, seq: int) -> list[int]:
    """Keys of one published segment (checksum verified)."""
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        meta = s.segment_location.read_meta(partition, seq)
        with s.read_segment(meta) as r:
            return sorted(k for b in r.batches() for k in b.column("k").to_pylist())


def reopen_keys(root: Path, config: StoreConfig | None = None, partition: str = "p-0") -> list[int]:
    """Reopen the partition as its next writer (recovery), close it (which seals the
    committed data it holds), then read every key."""
    with QuiverStore.open(str(root), config, partition=partition, background=False):
        pass
    return read_keys(root, config)


# -- Spark -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    scratch = tmp_path_factory.mktemp("review-spark")
    session = local_session(
        scratch, "quiver-review-scenarios", master="local[2]", driver_memory="1g"
    )
    yield session
    session.stop()


def run_stream(
    spark: Any, root: Path, subscriber: str, ckpt: Path, **options: str
) -> tuple[list[int], str | None]:
    """One ``Trigger.AvailableNow`` run of a subscriber: (keys received, error or None)."""
    got = Collector()
    q = (
        stream(spark, str(root), subscriber, **options)
        .writeStream.foreachBatch(got)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = q.awaitTermination(180)
    except Exception as e:
        return got.keys(), str(e)
    if not finished:
        q.stop()
        raise AssertionError(f"subscriber {subscriber}: AvailableNow run did not finish in 180s")
    err = q.exception()
    return got.keys(), (str(err) if err is not None else None)


class Checks:
    """Independent checks of one scenario: all run, the failures are reported together."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # AssertionError included: keep going, report all
            self.failures.append(f"- {what}: {type(e).__name__}: {str(e)[:1500]}")
            return None

    def verify(self) -> None:
        assert not self.failures, "\n" + "\n".join(self.failures)


def ack(root: Path, subscriber: str, seqs: dict[str, list[int]]) -> None:
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        s.subscribers.record_many(subscriber, seqs, Outcome.ACK)


# == 1. nullability change =========================================================================


def test_rows_survive_a_batch_that_differs_only_in_nullability(tmp_path: Path, child: Any) -> None:
    root = tmp_path / "store"
    w = child("nullable_plain", root=str(root))
    w.ready()  # [1,2,3] non-null, [10,11] nullable, flush() returned: all acknowledged
    w.kill9()
    assert reopen_keys(root) == [1, 2, 3, 10, 11]


def test_committed_transactions_survive_a_nullability_change_and_a_maintenance_tick(
    tmp_path: Path, child: Any
) -> None:
    root = tmp_path / "store"
    w = child("nullable_txn", root=str(root), pin=False)
    w.ready()  # A committed, B (nullable) committed, one maintenance tick
    w.kill9()
    assert reopen_keys(root) == [1, 2, 3, 10, 11]


def test_partition_with_an_undecided_transaction_pinning_the_wal_opens_after_a_nullability_change(
    tmp_path: Path, child: Any
) -> None:
    root = tmp_path / "store"
    w = child("nullable_txn", root=str(root), pin=True)
    ev = w.ready()  # as above, plus app C begun after B's data and left undecided
    w.kill9()
    assert reopen_keys(root) == [1, 2, 3, 10, 11], "undecided C must stay invisible"
    # the undecided transaction is still there and still decidable
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        assert s.commit_txn("appC", 0, [("p-0", ev["txn_c"])], rows=2)
    assert reopen_keys(root) == [1, 2, 3, 10, 11, 100, 101]


# == 2. a committed transaction larger than segment.target_size ====================================

BIG = {"target_size": 256 * 1024, "batches": 6, "rows_per_batch": 10_000}


@pytest.mark.parametrize("then", ["reopen", "driver_finalizes_idle"])
def test_committed_transaction_larger_than_the_target_size_of_a_killed_writer(
    tmp_path: Path, child: Any, then: str
) -> None:
    root = tmp_path / "store"
    config = {"target_size": BIG["target_size"], "max_open_s": 3600}
    w = child("big_txn", root=str(root), app="query-big", version=7, **BIG)
    ev = w.ready()  # flushed: the task acknowledged; killed before anything was sealed
    w.kill9()
    assert ev["bytes"] > 4 * BIG["target_size"], ev
    expected = list(range(ev["rows"]))
    d = child(
        "commit", root=str(root), config=config, app="query-big", version=7,
        winners=[["p-0", ev["txn_id"]]], rows=ev["rows"],
        finalize_idle=then == "driver_finalizes_idle",
    ).done()  # fmt: skip
    assert d["won"] is True
    store_config = StoreConfig(
        segment=SegmentConfig(target_size_bytes=BIG["target_size"], max_open_duration_s=3600)
    )
    if then == "driver_finalizes_idle":
        assert [p for p, _ in d["sealed"]] == ["p-0"], d
        assert read_keys(root, store_config) == expected
    # the next writer of the partition (a new task on that slot) opens it
    assert reopen_keys(root, store_config) == expected
    # and another handle can still seal idle partitions (nothing left to seal)
    with QuiverStore.open(str(root), store_config, partition=None, create=False,
                          background=False) as s:  # fmt: skip
        assert s.finalize_idle_partitions() == []
    assert read_keys(root, store_config) == expected


def test_spark_writers_skip_a_slot_that_cannot_be_recovered(
    tmp_path: Path, child: Any, spark: Any
) -> None:
    from quiver_spark.spark.slots import host_tag

    root = tmp_path / "store"
    slot0 = f"{host_tag()}-0"
    w = child("append_only", root=str(root), partition=slot0, first=0, rows=10, batches=3)
    wal = w.ready()["wal"]
    w.kill9()
    # damage inside the first record of the slot's WAL, valid records after it: the
    # partition refuses to open (corruption, not a torn tail) until an operator acts
    flip_byte(root / "partitions" / slot0 / "wal" / wal[0], 32 + 20)
    with pytest.raises(Exception, match=wal[0]):
        QuiverStore.open(str(root), partition=slot0, background=False)
    new = list(range(500, 520))
    df = spark.createDataFrame([(k, f"{k:08d}") for k in new], "k long, v string")
    df.write.format("quiver").mode("append").option("segment.max_open_duration", "1s").save(
        str(root)
    )
    deadline, got = time.monotonic() + 30, read_keys(root)
    while got != new and time.monotonic() < deadline:
        time.sleep(1)
        got = read_keys(root)
    assert got == new


# == 3. sequence numbers after the loss of wal.path =================================================


def test_segment_sequence_is_not_reused_after_the_executor_local_wal_path_is_lost(
    tmp_path: Path, child: Any, spark: Any
) -> None:
    root, wal = tmp_path / "store", tmp_path / "node-local-disk" / "wal"
    pid = "host-a-0"
    config = {"wal_path": str(wal)}
    ckpt = tmp_path / "ckpt-exporter"
    _ok(quiver("subscribers", root, "add", "exporter", "--create", "--wal-path", wal))
    first = child("write", root=str(root), partition=pid, first=0, rows=10, segments=3,
                  config=config).done()["seqs"]  # fmt: skip
    keys, err = run_stream(spark, root, "exporter", ckpt, **{"wal.path": str(wal)})
    assert err is None, err
    assert keys == list(range(30))
    _ok(quiver("gc", root, "--wal-path", wal))
    assert published(root, pid) == [], "setup: the exporter acked everything; retention reclaims it"

    shutil.rmtree(wal)  # the node's local disk is replaced
    second = child("write", root=str(root), partition=pid, first=100, rows=10, segments=2,
                   config=config).done()["seqs"]  # fmt: skip
    assert min(second) > max(first), f"seqs {second} reuse seqs already used ({first})"
    _ok(quiver("gc", root, "--wal-path", wal))
    assert published(root, pid) == second, "retention deleted segments nobody read"
    keys, err = run_stream(spark, root, "exporter", ckpt, **{"wal.path": str(wal)})
    assert err is None, err
    assert keys == list(range(100, 120))


# == 4. one damaged .meta ===========================================================================


def test_one_damaged_meta_is_contained_to_its_segment(
    tmp_path: Path, child: Any, spark: Any
) -> None:
    root = tmp_path / "store"
    _ok(quiver("subscribers", root, "add", "s", "--create"))
    ledger: dict[tuple[str, int], list[int]] = {}
    for pid, first, n in (("p-0", 0, 4), ("p-1", 100, 2)):
        seqs = child("write", root=str(root), partition=pid, first=first, rows=10,
                     segments=n).done()["seqs"]  # fmt: skip
        for i, seq in enumerate(seqs):
            ledger[(pid, seq)] = list(range(first + 10 * i, first + 10 * (i + 1)))
    assert sorted(ledger) == [
        ("p-0", 1),
        ("p-0", 2),
        ("p-0", 3),
        ("p-0", 4),
        ("p-1", 1),
        ("p-1", 2),
    ]
    ack(root, "s", {"p-0": [1], "p-1": [1, 2]})
    damaged = meta_path(root, 2)
    flip_byte(damaged, damaged.stat().st_size // 2)
    checks = Checks()

    def retained() -> list[int]:
        return sorted(k for (p, seq), ks in ledger.items()
                      if (p, seq) != ("p-0", 2) and seq in published(root, p) for k in ks)  # fmt: skip

    def gc() -> None:
        r = quiver("gc", root)
        out = r.stdout + r.stderr
        assert (published(root, "p-0"), published(root, "p-1")) == ([2, 3, 4], []), (
            f"acked segments not reclaimed (exit {r.returncode}):\n{out}"
        )
        assert "kept segments not verified" in out, f"gc claims more than it checked:\n{out}"
        full = quiver("gc", root, "--full")
        assert damaged.name in full.stdout + full.stderr, (
            f"gc --full does not name the damaged file:\n{full.stdout + full.stderr}"
        )

    checks.check("quiver gc reclaims the acked segments, gc --full names the damaged .meta", gc)

    def strict() -> None:
        keys, err = run_stream(
            spark, root, "strict", tmp_path / "ck-strict", maxSegmentsPerTrigger="1"
        )
        assert err is not None, f"failOnDataLoss=true read past a damaged segment: {keys}"
        assert "p-0" in err and damaged.name in err, f"the file is not named:\n{err[-2000:]}"

    checks.check("a default readStream fails naming the damaged segment", strict)

    def lenient() -> None:
        expected = retained()
        keys, err = run_stream(spark, root, "lenient", tmp_path / "ck-lenient",
                               maxSegmentsPerTrigger="1", failOnDataLoss="false")  # fmt: skip
        assert err is None, err[-3000:]
        assert keys == expected

    checks.check("a failOnDataLoss=false readStream continues past it", lenient)

    def writer() -> None:
        seqs = child("write", root=str(root), partition="p-0", first=1000, rows=10,
                     segments=1).done()["seqs"]  # fmt: skip
        assert seqs[0] > 4, seqs
        ledger[("p-0", seqs[0])] = list(range(1000, 1010))
        assert segment_keys(root, "p-0", seqs[0]) == list(range(1000, 1010))

    checks.check("a new writer of the damaged partition opens and writes", writer)
    checks.check(
        "quiver subscribers add works", lambda: _ok(quiver("subscribers", root, "add", "late"))
    )

    def sink_and_batch_read() -> None:
        new = list(range(2000, 2005))
        df = spark.createDataFrame([(k, f"{k:08d}") for k in new], "k long, v string")
        (df.write.format("quiver").mode("append").option("segment.max_open_duration", "1s")
         .save(str(root)))  # fmt: skip

        def batch_read() -> list[int]:
            reader = spark.read.format("quiver").option("failOnDataLoss", "false")
            return sorted(r[0] for r in reader.load(str(root)).select("k").collect())

        # committed rows are sealed by the worker's maintenance within max_open_duration
        deadline, got = time.monotonic() + 30, batch_read()
        while not set(new) <= set(got) and time.monotonic() < deadline:
            time.sleep(1)
            got = batch_read()
        assert got == sorted(retained() + new)

    checks.check("a Spark write into the store and a lenient batch read", sink_and_batch_read)
    checks.verify()


# == 5. a segment that vanished before the first listing ===========================================


def test_segment_quarantined_before_a_new_subscriber_starts_is_reported_as_data_loss(
    tmp_path: Path, child: Any, spark: Any
) -> None:
    root = tmp_path / "store"
    # a consumer that has not read anything yet keeps every segment retained
    _ok(quiver("subscribers", root, "add", "archive", "--create"))
    assert child("write", root=str(root), first=0, rows=10, segments=3).done()["seqs"] == [1, 2, 3]
    arrow = arrow_path(root, 2)
    flip_byte(arrow, arrow.stat().st_size // 2)
    r = quiver("fsck", root, "--quarantine")
    assert published(root) == [1, 3], (
        f"setup: fsck --quarantine moves seq 2 away\n{r.stdout}{r.stderr}"
    )
    checks = Checks()

    def strict() -> None:
        keys, err = run_stream(spark, root, "fresh-strict", tmp_path / "ck-strict")
        assert err is not None, f"the loss of published seq 2 went unreported; read {keys}"
        assert "p-0" in err and re.search(r"\b(segment|seq|sequence)\W+2\b", err), err[-2000:]

    checks.check("failOnDataLoss=true fails naming partition and seq 2", strict)

    def lenient() -> None:
        keys, err = run_stream(spark, root, "fresh-lenient", tmp_path / "ck-lenient",
                               failOnDataLoss="false")  # fmt: skip
        assert err is None, err[-3000:]
        assert keys == list(range(10)) + list(range(20, 30))

    checks.check("failOnDataLoss=false skips it and reads the rest", lenient)
    checks.verify()


# == 6. lower-severity items =========================================================================


def test_segment_deleted_by_a_retention_pass_killed_mid_delete_stays_deleted(
    tmp_path: Path, child: Any
) -> None:
    root = tmp_path / "store"
    _ok(quiver("subscribers", root, "add", "s", "--create"))
    w = child("write", root=str(root), first=0, rows=10, segments=1, mode="kill")
    assert w.ready()["seqs"] == [1]  # killed right after publishing: STATE names seq 1
    w.kill9()
    ack(root, "s", {"p-0": [1]})
    ev = child("retention_dies_mid_delete", root=str(root)).outcome()
    assert ev["event"] == "ready" or ev.get("deleted") == {"p-0": [1]}, ev
    assert not meta_path(root, 1).exists(), "setup: retention unlinked the .meta"
    assert reopen_keys(root) == [], "the deleted segment came back"
    assert published(root) == []


def test_writer_with_another_segments_path_is_refused_naming_both(
    tmp_path: Path, child: Any
) -> None:
    root, recorded, other = tmp_path / "store", tmp_path / "seg-a", tmp_path / "seg-b"
    child("write", root=str(root), first=0, rows=3, segments=1,
          config={"segments_path": str(recorded)}).done()  # fmt: skip
    ev = child("segments_path_mismatch", root=str(root), segments_path=str(other)).done()
    assert ev["refused"], f"a writer with segment.path={other} was accepted: {ev}"
    assert str(recorded) in ev["error"] and str(other) in ev["error"], ev["error"]
    assert published(root, segments=other) == []


def test_append_does_not_raise_once_its_record_is_durable(tmp_path: Path, child: Any) -> None:
    # Reached from a real process by failing the segment storage (ENOSPC on every
    # create under segments/) while the WAL works: the append's own finalize fails
    # after its record is durable (wal.flush_interval=0).
    root = tmp_path / "store"
    w = child("append_while_segments_fail", root=str(root))
    ev = w.ready()
    w.kill9()
    assert reopen_keys(root) == [1, 2, 3], f"append outcomes {ev['outcomes']}"
    assert ev["outcomes"] == ["ok"], ev


def test_read_schema_naming_a_column_the_store_lacks_fails_naming_it(
    tmp_path: Path, child: Any, spark: Any
) -> None:
    root = tmp_path / "store"
    child("write", root=str(root), first=0, rows=10, segments=1).done()
    schema = "k long, v string, not_in_store int"
    checks = Checks()

    def batch() -> None:
        try:
            rows = spark.read.format("quiver").schema(schema).load(str(root)).collect()
        except Exception as e:
            assert "not_in_store" in str(e), str(e)[-2000:]
            return
        raise AssertionError(f"read returned {len(rows)} rows, e.g. {rows[:2]}")

    checks.check("a batch read with that schema fails naming the column", batch)

    def streaming() -> None:
        got = Collector()
        try:
            q = (
                spark.readStream.format("quiver").schema(schema).option("subscriber", "typed")
                .load(str(root)).writeStream.foreachBatch(got)
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
                .start()
            )  # fmt: skip
            q.awaitTermination(180)
            err = q.exception()
        except Exception as e:
            err = e
        assert err is not None, f"the stream delivered {got.batches}"
        assert "not_in_store" in str(err), str(err)[-2000:]

    checks.check("a readStream with that schema fails naming the column", streaming)
    checks.verify()


def _sizes(text: str) -> list[float]:
    """Every size mentioned in ``text``, in bytes (plain integers or KB/MB/MiB...)."""
    units = {"": 1, "b": 1, "kb": 1024, "kib": 1024, "mb": 1024**2, "mib": 1024**2,
             "gb": 1024**3, "gib": 1024**3}  # fmt: skip
    out = []
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(kib|mib|gib|kb|mb|gb|b)?\b", text, re.I):
        out.append(float(num) * units[(unit or "").lower()])
    return out


def test_batch_larger_than_the_wal_cap_fails_at_once_naming_the_sizes(
    tmp_path: Path, child: Any
) -> None:
    root = tmp_path / "store"
    limit = 1024 * 1024
    ev = child("oversized_batch", root=str(root), wal_max_size=limit, backpressure_timeout_s=10.0,
               rows=60_000).done()  # fmt: skip
    assert ev["batch_bytes"] > 2 * limit
    assert ev["error"] is not None, "a batch larger than wal.max_size was accepted"
    assert ev["elapsed_s"] < 3.0, f"failed only after {ev['elapsed_s']:.1f}s: {ev['error']}"
    assert "retry later" not in ev["error"] and ev["retryable"] is not True, ev
    sizes = _sizes(ev["error"])
    assert any(abs(s - limit) <= limit * 0.05 for s in sizes), f"limit not named: {ev['error']}"
    assert any(s > limit * 1.5 for s in sizes), f"batch size not named: {ev['error']}"
    assert reopen_keys(root) == [1, 2, 3]


def test_two_processes_committing_one_batch_agree_on_a_single_decision(
    tmp_path: Path, child: Any
) -> None:
    root = tmp_path / "store"
    QuiverStore.open(str(root), partition=None, background=False).close()
    versions = 100
    res = child("commit_race", root=str(root), versions=versions, out_dir=str(tmp_path)).done()
    a, b = res["results"]["committer-a"], res["results"]["committer-b"]
    bad = []
    with QuiverStore.open(str(root), partition=None, create=False, background=False) as s:
        for v in range(versions):
            rec = s.commits.get("race", v)
            on_disk = sorted([p, t] for p, t in rec.winners) if rec else None
            ra, rb = a[v], b[v]
            ok = (
                "error" not in ra and "error" not in rb
                and [ra["won"], rb["won"]].count(True) == 1
                and ra["winners"] == rb["winners"] == on_disk
                and on_disk == [["committer-a" if ra["won"] else "committer-b", v]]
            )  # fmt: skip
            if not ok:
                bad.append(f"version {v}: a={ra} b={rb} on disk={on_disk}")
    assert not bad, f"{len(bad)} of {versions} commits disagree:\n" + "\n".join(bad[:10])
