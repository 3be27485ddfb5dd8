"""A pipeline through Quiver driven from a test: submit, kill, restart, finish, audit.

:class:`Pipeline` submits ``jobs/pipeline.py`` (one driver: a producer into the
``quiver`` sink and two subscribers reading it into Parquet) with ``spark-submit``
from the fresh venv, to a standalone cluster or ``local[2]``; it kills executors
(kill -9 of a CoarseGrainedExecutorBackend JVM) and the driver (kill -9 of the
JVM and its Python children), restarts the driver from its checkpoints, and stops
it once both subscribers hold every key. The audit then checks every key of each
subscriber (exactly once) and that every segment both subscribers acked is gone:
during the run, but for those of each subscriber's last acknowledgement (the
process's stop may cut the pass that follows it), and all of them after the next
pass of a new handle, as ``quiver gc`` runs it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from integration.audit import KeyAudit, audit_keys, delivered, delivered_rows
from integration.harness import (
    FreshVenv,
    SparkSubmit,
    StandaloneCluster,
    jobs_copy,
    kill_pids,
    listening_addresses,
    processes_under,
    wait_gone,
)
from quiver_spark.spark.offsets import QuiverOffset
from quiver_spark.subscription.position import Position

SUBSCRIBERS = {"fast": "1:100", "slow": "2:3"}
SINK_OPTIONS = {
    "segment.max_open_duration": "1s",
    "segment.target_size": "256KB",
    "wal.flush_interval": "25ms",
}


@dataclass
class Pipeline:
    """One pipeline: its paths, its driver, what was killed and when.

    ``master`` is a standalone master URL (then ``cluster`` is that cluster, needed
    for executor kills) or ``local[N]``. ``store_args`` go to ``quiver subscribers
    PATH add NAME --create`` (``--segments-path URL``); ``env`` to the driver.
    """

    venv: FreshVenv
    master: str
    cluster: StandaloneCluster | None
    root: Path
    total: int
    rows_per_batch: int
    sink_options: dict[str, str] = field(default_factory=lambda: dict(SINK_OPTIONS))
    source_options: dict[str, str] = field(default_factory=dict)
    store_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    store_url: str | None = None
    """An object-store root (``s3://bucket/prefix``) instead of ``<root>/store``."""
    storage_options: dict[str, str] = field(default_factory=dict)
    """The object store's client settings, given to the store as ``storage.<key>``
    options (sink and source) and ``--storage-option`` flags (CLI)."""
    producer_trigger_s: float = 1.0
    kills: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    audited: tuple[dict[str, KeyAudit], ReclaimAudit] | None = field(default=None, repr=False)
    """The audit of the run, made once (:func:`audit_run`)."""

    def __post_init__(self) -> None:
        for d in ("ckpt", "out"):
            (self.root / d).mkdir(parents=True)
        storage = {f"storage.{k}": v for k, v in self.storage_options.items()}
        self.sink_options = {**self.sink_options, **storage}
        self.source_options = {**self.source_options, **storage}
        self.store_args = [
            *self.store_args,
            *(a for k, v in self.storage_options.items() for a in ("--storage-option", f"{k}={v}")),
        ]
        for name in SUBSCRIBERS:  # before the first write, as the README tells operators
            self.venv.quiver(
                "subscribers", str(self.store), "add", name, "--create", *self.store_args,
                env=self.env,
            )  # fmt: skip
        jobs = jobs_copy(self.root / "jobs")
        args = ["--store", str(self.store), "--ckpt", str(self.root / "ckpt"),
                "--out", str(self.root / "out"), "--events", str(self.events),
                "--stop-file", str(self.stop_file), "--total", str(self.total),
                "--rows-per-batch", str(self.rows_per_batch)]  # fmt: skip
        args += ["--producer-trigger", str(self.producer_trigger_s)]
        args += [a for n, spec in SUBSCRIBERS.items() for a in ("--subscriber", f"{n}:{spec}")]
        args += [a for k, v in self.sink_options.items() for a in ("--sink-option", f"{k}={v}")]
        args += [a for k, v in self.source_options.items() for a in ("--source-option", f"{k}={v}")]
        self.driver = SparkSubmit(
            self.venv, self.root, self.master, jobs / "pipeline.py", args, env_extra=self.env
        )

    @property
    def store(self) -> Path | str:
        return self.store_url if self.store_url is not None else self.root / "store"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def stop_file(self) -> Path:
        return self.root / "STOP"

    def out(self, name: str) -> Path:
        return self.root / "out" / name

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:.0f}s"

    def read_events(self) -> list[dict]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line]

    def rows(self) -> dict[str, int]:
        return {name: delivered_rows(self.out(name)) for name in SUBSCRIBERS}

    def diagnostics(self) -> str:
        events = "\n".join(json.dumps(e)[:400] for e in self.read_events()[-15:])
        return (
            f"after {self.elapsed()}, kills {self.kills}, delivered {self.rows()}\n"
            f"--- events\n{events}\n{self.driver.log_tail()}\n"
            + (self.cluster.logs_tail(15) if self.cluster else "")
        )

    def check_alive(self) -> None:
        if not self.driver.running():
            code = self.driver.proc.returncode if self.driver.proc else None
            raise AssertionError(f"driver exited ({code})\n{self.diagnostics()}")

    def wait_until(self, ok: Callable[[], bool], what: str, timeout_s: float) -> None:
        """Poll ``ok`` (bounded); fail early, with diagnostics, if the driver exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ok():
                return
            if not self.driver.running():
                raise AssertionError(
                    f"driver exited ({self.driver.proc.returncode}) while "  # type: ignore[union-attr]
                    f"waiting for {what}\n{self.diagnostics()}"
                )
            time.sleep(0.5)
        raise AssertionError(f"no {what} within {timeout_s}s\n{self.diagnostics()}")

    # -- faults --------------------------------------------------------------------
    def kill_executor(self, rng: random.Random) -> None:
        assert self.cluster is not None, "executor kills need a standalone cluster"
        cluster = self.cluster
        self.wait_until(lambda: bool(cluster.executor_pids()), "an executor to kill", 180)
        before = cluster.executor_pids()
        assert before, f"no executor JVM to kill\n{self.diagnostics()}"
        victim = rng.choice(before)
        kill_pids([victim])
        assert not wait_gone([victim], 20), f"executor {victim} survived kill -9"
        self.kills.append(f"executor@{self.elapsed()}")
        print(f"[pipeline] {self.elapsed()} kill -9 executor pid {victim} (of {before})")
        self.wait_until(
            lambda: any(p not in before for p in cluster.executor_pids()),
            "replacement executor",
            120,
        )

    def kill_driver(self) -> None:
        victims = self.driver.kill9()
        self.kills.append(f"driver@{self.elapsed()}")
        print(f"[pipeline] {self.elapsed()} kill -9 driver (pids {victims})")
        if self.cluster is None:
            return
        self.cluster.wait_for(lambda s: not s.get("activeapps"), "app gone after driver kill", 120)
        leftover = wait_gone(self.cluster.executor_pids(), 60)
        assert not leftover, f"executors of the killed driver still run: {leftover}"

    def lose_machine(self, name: str) -> list[int]:
        """Machine ``name`` of an isolated cluster is lost: its worker, executors and
        Python workers killed by SIGKILL at once, its private disk gone."""
        assert self.cluster is not None and self.cluster.isolated_workers, (
            "a machine loss needs a cluster of isolated workers"
        )
        victims = self.cluster.lose_machine(name)
        self.kills.append(f"machine {name}@{self.elapsed()}")
        print(f"[pipeline] {self.elapsed()} machine {name} lost (kill -9 of pids {victims})")
        return victims

    def committed_batches(self, query: str = "producer") -> int:
        """How many micro-batches ``query`` committed (its checkpoint's ``commits/``)."""
        commits = self.root / "ckpt" / query / "commits"
        if not commits.is_dir():
            return 0
        return sum(p.name.isdigit() for p in commits.iterdir())

    def start_driver(self) -> None:
        self.driver.start()
        print(f"[pipeline] {self.elapsed()} driver attempt {self.driver.attempts} submitted")

    def progressed(self, name: str, beyond: int) -> Callable[[], bool]:
        return lambda: delivered_rows(self.out(name)) > beyond

    def complete(self) -> bool:
        done = any(e["event"] == "producer_done" for e in self.read_events())
        return done and all(n >= self.total for n in self.rows().values())

    def finish(self, timeout_s: float) -> None:
        self.wait_until(self.complete, "complete delivery to both subscribers", timeout_s)
        self.stop_file.write_text("stop\n")
        code = self.driver.wait(120)
        assert code == 0, f"driver exit code {code}\n{self.diagnostics()}"


# -- audit ---------------------------------------------------------------------------


@dataclass
class ReclaimAudit:
    segments_delivered: int
    acked_by_all: int
    acked_by_all_still_present: list[tuple[str, int]]
    """Before the audit's pass, beyond the last acknowledgements' segments."""
    last_acks_left: int
    """Segments of a last acknowledgement still present before the audit's pass."""
    left_after_next_pass: list[tuple[str, int]]
    retained: int
    retained_unacked_by: dict[str, int]

    def line(self) -> str:
        return (
            f"segments delivered {self.segments_delivered}, acked by both "
            f"{self.acked_by_all}, reclaimed during the run "
            f"{self.acked_by_all - len(self.acked_by_all_still_present) - self.last_acks_left}, "
            f"acked-by-both still present {len(self.acked_by_all_still_present)} "
            f"(+{self.last_acks_left} of a last acknowledgement, "
            f"{len(self.left_after_next_pass)} after the next pass), "
            f"retained {self.retained} (unacked by {self.retained_unacked_by})"
        )


def _last_two_ends(ckpt: Path) -> list[Position]:
    """The end positions of the last two batches a source query committed, oldest
    first: each batch's last line in ``offsets/`` for the two highest ids in
    ``commits/`` (fewer when it committed fewer)."""
    if not (ckpt / "commits").is_dir():
        return []
    ids = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    ends = []
    for i in ids[-2:]:
        line = (ckpt / "offsets" / str(i)).read_text().splitlines()[-1]
        ends.append(QuiverOffset.from_json(json.loads(line)).position)
    return ends


def last_acknowledged(ckpts: list[Path]) -> set[tuple[str, int]]:
    """The segments each subscriber acknowledged last: those its last committed
    batch's end includes and its next to last one's does not (newest first, a backlog
    drained under an unchanged head counts too). The source acknowledges a batch's end
    when it plans the next trigger and runs a retention pass in the same call; a query
    stopped during that call leaves the pass undone, and no pass of that process
    follows."""
    out: set[tuple[str, int]] = set()
    for ckpt in ckpts:
        ends = _last_two_ends(ckpt)
        if not ends:
            continue
        last, before = ends[-1], (ends[0] if len(ends) > 1 else Position({}))
        for p in last.segments:
            out |= {
                (p, q)
                for q in range(1, last.get(p) + 1)
                if last.covers(p, q) and not before.covers(p, q)
            }
    return out


def audit_reclaim(
    store: Path | str,
    segments: set[tuple[str, int]],
    last_acks: set[tuple[str, int]],
    storage: dict[str, str] | None = None,
) -> ReclaimAudit:
    from quiver_spark import QuiverStore

    with QuiverStore.open(
        str(store), partition=None, create=False, background=False, storage_options=storage
    ) as qs:
        present = {(m.partition, m.seq) for m in qs.segments()}
        reg = qs.subscribers
        names = reg.subscribers()
        assert sorted(names) == sorted(SUBSCRIBERS), names
        acked_all = {s for s in segments | present if reg.done_by_all(*s)}
        unacked: dict[str, int] = {}
        for part, seq in present:
            for who in reg.undone_by(part, seq):
                unacked[who] = unacked.get(who, 0) + 1
        qs.run_retention()  # this new handle's first pass, as quiver gc runs it
        after = {(m.partition, m.seq) for m in qs.segments()}
    left = acked_all & present
    return ReclaimAudit(
        segments_delivered=len(segments),
        acked_by_all=len(acked_all),
        acked_by_all_still_present=sorted(left - last_acks),
        last_acks_left=len(left & last_acks),
        left_after_next_pass=sorted(acked_all & after),
        retained=len(present),
        retained_unacked_by=unacked,
    )


def audit_run(run: Pipeline) -> tuple[dict[str, KeyAudit], ReclaimAudit]:
    """Every key of each subscriber and what the store reclaimed, once per run: the
    reclaim audit ends with a retention pass of its own, so a second audit would see
    its deletions as the run's; later calls return the first answer."""
    if run.audited is None:
        run.audited = _audit_run(run)
    return run.audited


def _audit_run(run: Pipeline) -> tuple[dict[str, KeyAudit], ReclaimAudit]:
    audits: dict[str, KeyAudit] = {}
    segments: set[tuple[str, int]] = set()
    for name in SUBSCRIBERS:
        table = delivered(run.out(name), ("key", "payload", "_quiver_partition", "_quiver_segment"))
        keys = pc.cast(table["key"], pa.int64()).to_pylist()
        audits[name] = audit_keys(name, keys, run.total, table["payload"].to_pylist())
        segments |= set(
            zip(
                table["_quiver_partition"].to_pylist(),
                table["_quiver_segment"].to_pylist(),
                strict=True,
            )
        )
    last = last_acknowledged([run.root / "ckpt" / name for name in SUBSCRIBERS])
    return audits, audit_reclaim(run.store, segments, last, run.storage_options or None)


def report(run: Pipeline, audits: dict[str, KeyAudit], reclaim: ReclaimAudit) -> str:
    lines = [
        f"[audit] rows produced {run.total}; kills survived {len(run.kills)}: {run.kills}; "
        f"driver attempts {run.driver.attempts}; query restarts after a slow Python start "
        f"{sum(e['event'] == 'query_restarted' for e in run.read_events())}; wall {run.elapsed()}"
    ]
    lines += [f"[audit] {a.line()}" for a in audits.values()]
    lines.append(f"[audit] {reclaim.line()}")
    return "\n".join(lines)


def assert_exactly_once(run: Pipeline) -> None:
    audits, reclaim = audit_run(run)
    text = report(run, audits, reclaim)
    print("\n" + text)
    for a in audits.values():
        assert a.exactly_once, (
            f"{a.line()}; duplicated keys e.g. {a.duplicate_examples}, "
            f"lost keys e.g. {a.lost_examples}\n{text}"
        )
    assert not reclaim.acked_by_all_still_present, (
        f"segments acked by every subscriber were not reclaimed: "
        f"{reclaim.acked_by_all_still_present[:10]}\n{text}"
    )
    assert not reclaim.left_after_next_pass, (
        f"segments acked by every subscriber outlived a new handle's retention pass: "
        f"{reclaim.left_after_next_pass[:10]}\n{text}"
    )
    assert reclaim.acked_by_all > 0, f"no segment was acked by both subscribers\n{text}"


def assert_loopback_only(cluster: StandaloneCluster) -> None:
    addrs = listening_addresses(processes_under(cluster.root.parent))
    assert addrs, "no listening socket found for the cluster"
    bad = [a for a in addrs if not a.startswith(("127.", "::ffff:127.", "::1:"))]
    assert not bad, f"cluster listens beyond loopback: {bad}"
