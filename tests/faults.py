"""Fault injection and crash simulation shared by the engine tests.

- :class:`FaultyIO` is a :class:`~quiver_spark.fs.FileIO` that counts operations,
  records a trace and fails chosen operations with a chosen errno.
- :class:`CrashSimulator` turns a trace recorded with ``FaultyIO(record_data=True)``
  into the on-disk states a crash at each point of the trace could leave.

Typical crash-state test::

    sim = CrashSimulator.snapshot(root)          # durable state before the workload
    io = FaultyIO(record_data=True)
    run_workload(root, io)                       # every mutation goes through io
    for state in sim.states(io.trace):
        target = state.materialize(tmp_path / f"s{state.point}-{state.kind}")
        check_recovery(target, acked_at(state.point))
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import functools
import hashlib
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

from quiver_spark.fs import FileIO

# -- fault-injecting file layer ----------------------------------------------------


@dataclass
class TraceOp:
    """One primitive operation seen by :class:`FaultyIO`.

    ``index`` is the position in the trace; ``size`` the bytes written (for ``write``)
    or the new length (for ``truncate``); ``data`` the bytes written when recording
    data (for a failed partial write: the prefix that reached the file); ``src`` the
    source of a ``rename`` or ``link`` (``path`` is its destination); ``mode`` is ``create``
    (truncating) or ``append`` for ``open``. ``failed`` is set with ``errno`` when the
    operation was made to fail.
    """

    index: int
    op: str
    path: str
    size: int = 0
    data: bytes | None = None
    src: str | None = None
    mode: str | None = None
    failed: bool = False
    errno: int | None = None


FILE_KINDS = (
    "wal", "state", "heartbeat", "lock", "store", "policy", "policy-copy", "arrow", "meta",
    "quarantine",
    "manifest", "lease", "acklog", "checkpoint", "sub", "readers", "commit", "metrics", "dir",
    "other",
    "remote-arrow", "remote-meta", "remote-quarantine", "remote-dir",
)  # fmt: skip
"""Every kind of file :func:`file_kind` tells apart (ARCHITECTURE.md's damage table)."""


@functools.lru_cache(maxsize=1 << 16)  # asked again for the same paths on every traced call
def file_kind(path: str) -> str:
    """The kind of store file ``path`` is (its temporary twin counts as the same kind).

    Directories count as ``dir`` (``listdir``, ``mkdir``, ``fsync_dir`` on them) except
    a partition's ``wal/``, which is ``wal``.
    """
    if path.startswith("faultmem://"):
        return "remote-" + file_kind(path[len("faultmem://") :])
    path = path.rstrip("/")
    name = os.path.basename(path)
    while name.endswith(".tmp"):  # x.tmp, x.<pid>-<tid>-<rand>.tmp
        name = name[: -len(".tmp")]
        if "." in name and name.rsplit(".", 1)[1].count("-") == 2:
            name = name.rsplit(".", 1)[0]
    parent = os.path.basename(os.path.dirname(path))
    if name.endswith(".wal") or name == "wal":
        return "wal"
    if name.endswith(".lost.jsonl") or (parent == "readers" and name.endswith(".lock")):
        return "readers"
    if name.endswith(".sub"):
        return "sub"
    if name.startswith("ack-") and name.endswith(".log"):
        return "acklog"
    if name.endswith(".commit"):
        return "commit"
    if name.endswith(".prom") or parent == "metrics":
        return "metrics"
    if name.endswith(".arrow"):
        return "arrow"
    if name.endswith(".meta"):
        return "meta"
    if name == "QUARANTINE" or name.startswith("QUARANTINE.") or name.endswith(".reason"):
        # QUARANTINE.<token>.tmp: the mark's temporary twin of one quarantine
        return "quarantine"
    simple = {
        "CHECKPOINT": "checkpoint",
        "STATE": "state",
        "HEARTBEAT": "heartbeat",
        "STORE": "store",
        "POLICY": "policy",
        "POLICY.copy": "policy-copy",
        "MANIFEST": "manifest",
        "LEASE": "lease",
    }
    if name in simple:
        return simple[name]
    if name in ("LOCK", ".store.lock") or name.endswith(".lock"):
        return "lock"
    if "." not in name:
        return "dir"
    return "other"


@dataclass
class Fault:
    """Fail the ``at``-th (1-based) matching ``op`` with ``errno``.

    ``sticky`` fails every later matching occurrence too (a full disk stays full),
    for ``sticky_for`` occurrences when given (the disk frees up again);
    ``path_contains`` restricts matching to paths containing it and ``kind`` to paths
    of one :func:`file_kind`; ``partial`` lets a failing write put the first half of
    its bytes into the file before raising (what a real ENOSPC in the middle of a
    write does).
    """

    op: str
    at: int
    errno: int = errno_mod.EIO
    sticky: bool = False
    path_contains: str | None = None
    partial: bool = False
    kind: str | None = None
    sticky_for: int | None = None
    seen: int = 0
    fired: int = 0

    def hit(self, op: str, path: str) -> bool:
        if op != self.op and self.op != "*":
            return False
        if self.path_contains and self.path_contains not in path:
            return False
        if self.kind and file_kind(path) != self.kind:
            return False
        self.seen += 1
        if self.seen == self.at or (self.sticky and self.seen > self.at and not self.cleared):
            self.fired += 1
            return True
        return False

    @property
    def cleared(self) -> bool:
        """A sticky fault that has fired its ``sticky_for`` times (the condition cleared)."""
        return self.sticky_for is not None and self.fired >= self.sticky_for

    @property
    def done(self) -> bool:
        """Will never fire again."""
        return self.seen >= self.at and (not self.sticky or self.cleared)


class InjectedError(OSError):
    """The OSError a :class:`Fault` raises (an ``OSError`` with the fault attached)."""

    def __init__(self, fault: Fault, path: str) -> None:
        super().__init__(fault.errno, os.strerror(fault.errno), path)
        self.fault = fault


class FaultyIO(FileIO):
    """A FileIO that counts, traces and fails operations.

    Parameters
    ----------
    faults
        Faults to arm; more can be added with :meth:`fail`.
    record_data
        Keep the bytes of every write in the trace (needed by :class:`CrashSimulator`).
    """

    def __init__(self, faults: Iterable[Fault] = (), *, record_data: bool = False) -> None:
        super().__init__()
        self.faults = list(faults)
        self.counts: Counter[str] = Counter()
        self.pairs: Counter[tuple[str, str]] = Counter()  # (op, file kind) seen
        self.trace: list[TraceOp] = []
        self.wants_data = record_data
        self._lock = threading.Lock()
        self._pending = threading.local()
        self.suspended = 0  # > 0: no fault fires (a test observing the store)

    @contextlib.contextmanager
    def no_faults(self) -> Iterator[None]:
        """Operations inside are traced but never failed (the test's own observation)."""
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1

    def fail(self, op: str, at: int, err: int = errno_mod.EIO, **kw: object) -> Fault:
        """Arm a fault on the ``at``-th ``op`` from now on (see :class:`Fault`)."""
        fault = Fault(op, at, err, **kw)  # type: ignore[arg-type]
        self.faults.append(fault)
        return fault

    def ops(self, op: str | None = None, path: str | None = None) -> list[TraceOp]:
        """Trace entries, optionally only one kind of operation and/or one path."""
        return [t for t in self.trace if (op is None or t.op == op) and (path in (None, t.path))]

    def before(self, op: str, path: str, data: bytes | None = None, size: int = 0) -> None:
        with self._lock:
            self.counts[op] += 1
            self.pairs[op, file_kind(path)] += 1
            entry = TraceOp(
                len(self.trace),
                op,
                path,
                size,
                data,
                src=getattr(self._pending, "src", None),
                mode=getattr(self._pending, "mode", None),
            )
            self._pending.src = self._pending.mode = None
            self.trace.append(entry)
            for fault in () if self.suspended else self.faults:
                if fault.hit(op, path):
                    entry.failed, entry.errno = True, fault.errno
                    if op == "write":
                        entry.data, entry.size = b"", 0
                    raise InjectedError(fault, path)

    # record what `before` cannot see -------------------------------------------------
    def open_create(self, path: str) -> int:
        self._pending.mode = "create"
        return super().open_create(path)

    def open_append(self, path: str) -> int:
        self._pending.mode = "append"
        return super().open_append(path)

    def rename(self, src: str, dst: str) -> None:
        self._pending.src = src
        super().rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self._pending.src = src
        super().link(src, dst)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        try:
            super().write(fd, data)
        except InjectedError as e:
            self._partial(fd, e, bytes(data))
            raise

    def writev(self, fd: int, buffers: list[bytes | memoryview]) -> None:
        try:
            super().writev(fd, buffers)
        except InjectedError as e:
            self._partial(fd, e, b"".join(memoryview(b).cast("B") for b in buffers))
            raise

    def _partial(self, fd: int, e: InjectedError, data: bytes) -> None:
        if not e.fault.partial:
            return
        prefix = data[: len(data) // 2]
        os.write(fd, prefix)
        with self._lock:
            entry = self.trace[-1]
            entry.size = len(prefix)
            entry.data = prefix if self.wants_data else None


# -- crash simulation ----------------------------------------------------------------


@dataclass
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes = b""
    boundaries: list[int] = field(default_factory=list)  # file lengths after each write


@dataclass(frozen=True)
class CrashState:
    """One possible directory state after a crash.

    ``point`` is the number of trace operations that had been issued (the crash hit
    just after ``trace[point - 1]``); ``kind`` is one of

    - ``process``: the process died (kill -9); the page cache survives, so every
      completed write and directory change is there;
    - ``power``: power loss, pessimistic: only fsynced data, only directory entries
      covered by a later fsync of their directory;
    - ``power-meta``: power loss where directory changes persisted but unsynced data
      did not (metadata journaled, data dropped);
    - ``power-prefix``: like ``process``, but one file lost its unsynced writes from
      some write boundary on (in-order write-back cut short);
    - ``torn``: like ``process``, but the last write reached the file only partly
      (``detail`` says how: a prefix, or a prefix followed by zeros).

    ``files`` maps paths relative to the simulated root to contents.
    """

    point: int
    kind: str
    files: dict[str, bytes]
    detail: str = ""

    def materialize(self, target: str | os.PathLike[str]) -> str:
        """Write this state under ``target`` (created) and return its path."""
        target = os.fspath(target)
        os.makedirs(target, exist_ok=True)
        for rel, content in self.files.items():
            path = os.path.join(target, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
        return target


class CrashSimulator:
    """Enumerates crash states of a directory from a :class:`FaultyIO` trace.

    The model: each path names an inode with its written bytes and the bytes as of its
    last ``fsync``; directory entries (create, rename, unlink) are durable once their
    directory is fsynced. Writes append (FileIO has no positional write); ``truncate``
    cuts; failed operations change nothing except the prefix of a partial write.
    Directories are assumed to exist; operations outside ``root`` are ignored.

    Parameters
    ----------
    root
        The directory the workload mutates.
    initial
        Its durable contents before the workload: relative path -> bytes.
    """

    def __init__(self, root: str | os.PathLike[str], initial: dict[str, bytes]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.initial = dict(initial)

    @classmethod
    def snapshot(cls, root: str | os.PathLike[str]) -> CrashSimulator:
        """A simulator whose initial durable state is what ``root`` holds now."""
        root = os.path.abspath(os.fspath(root))
        files: dict[str, bytes] = {}
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = f.read()
        return cls(root, files)

    def _rel(self, path: str | None) -> str | None:
        if path is None:
            return None
        p = os.path.abspath(path)
        if p != self.root and not p.startswith(self.root + os.sep):
            return None
        return os.path.relpath(p, self.root)

    def states(
        self, trace: list[TraceOp], *, points: Iterable[int] | None = None
    ) -> list[CrashState]:
        """Distinct crash states for every crash point (or only ``points``).

        Duplicate states (same files, same bytes) at the same point are dropped.
        """
        wanted = set(range(len(trace) + 1)) if points is None else set(points)
        live: dict[str, _Inode] = {}
        durable: dict[str, _Inode] = {}
        for rel, content in self.initial.items():
            live[rel] = durable[rel] = _Inode(bytearray(content), content, [len(content)])
        out: list[CrashState] = []
        if 0 in wanted:
            out.extend(self._at(0, live, durable, None))
        for i, op in enumerate(trace, start=1):
            last_write = self._apply(op, live, durable)
            if i in wanted:
                out.extend(self._at(i, live, durable, last_write))
        return out

    def power_loss_at_end(self, trace: list[TraceOp]) -> CrashState:
        """The state a power loss right after the last operation of ``trace`` leaves.

        A state equal to an earlier one is listed once, under the first kind: when every
        byte is durable the power-loss state is the process state, returned then.
        """
        states = self.states(trace, points=[len(trace)])
        return next((s for s in states if s.kind == "power"), states[0])

    def _apply(
        self, op: TraceOp, live: dict[str, _Inode], durable: dict[str, _Inode]
    ) -> tuple[str, int, bytes] | None:
        rel = self._rel(op.path)
        if rel is None:
            return None
        if op.op == "write":
            if op.data is None and op.size:
                raise ValueError("CrashSimulator needs a trace recorded with record_data=True")
            if not op.data:
                return None
            inode = live[rel]
            start = len(inode.data)
            inode.data += op.data
            inode.boundaries.append(len(inode.data))
            return rel, start, op.data
        if op.failed:
            return None
        if op.op == "open":
            if rel not in live:
                live[rel] = _Inode(boundaries=[0])
            elif op.mode == "create":
                live[rel].data = bytearray()
                live[rel].boundaries.append(0)
        elif op.op == "fsync" and rel in live:
            live[rel].synced = bytes(live[rel].data)
        elif op.op == "truncate":
            inode = live[rel]
            del inode.data[op.size :]
            inode.boundaries.append(len(inode.data))
        elif op.op == "rename":
            src = self._rel(op.src)
            if src is not None and src in live:
                live[rel] = live.pop(src)
        elif op.op == "link":
            src = self._rel(op.src)
            if src is not None and src in live and rel not in live:
                live[rel] = live[src]  # a second name of the same inode
        elif op.op == "unlink":
            live.pop(rel, None)
        elif op.op == "fsync_dir":
            d = "" if rel == "." else rel
            for name in set(live) | set(durable):
                if os.path.dirname(name) == d:
                    if name in live:
                        durable[name] = live[name]
                    else:
                        durable.pop(name, None)
        return None

    def _at(
        self,
        point: int,
        live: dict[str, _Inode],
        durable: dict[str, _Inode],
        last_write: tuple[str, int, bytes] | None,
    ) -> list[CrashState]:
        process = {n: bytes(i.data) for n, i in live.items()}
        cands = [
            CrashState(point, "process", process),
            CrashState(point, "power", {n: i.synced for n, i in durable.items()}),
            CrashState(point, "power-meta", {n: i.synced for n, i in live.items()}),
        ]
        for name, inode in live.items():
            data = bytes(inode.data)
            if not data.startswith(inode.synced):
                continue
            for b in sorted(set(inode.boundaries)):
                if len(inode.synced) < b < len(data):
                    files = dict(process)
                    files[name] = data[:b]
                    cands.append(CrashState(point, "power-prefix", files, f"{name}[:{b}]"))
        if last_write is not None:
            name, start, wrote = last_write
            if name in live and len(wrote) > 1:
                for keep in sorted({1, len(wrote) // 2, len(wrote) - 1}):
                    base = bytes(live[name].data[: start + keep])
                    for zeros in (False, True):
                        files = dict(process)
                        files[name] = base + (b"\0" * (len(wrote) - keep) if zeros else b"")
                        how = f"{name}: {keep}/{len(wrote)} bytes" + (" + zeros" if zeros else "")
                        cands.append(CrashState(point, "torn", files, how))
        seen: set[str] = set()
        out = []
        for state in cands:
            key = _digest(state.files)
            if key not in seen:
                seen.add(key)
                out.append(state)
        return out


def _digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha1()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha1(files[name]).digest())
    return h.hexdigest()


# -- a remote segment location with injected request failures -------------------------


class FaultyMemoryFS(MemoryFileSystem):
    """fsspec ``faultmem://``: an in-memory object store whose every request goes through
    :attr:`io`'s ``before`` first (``listdir``, ``stat``, ``read``, ``write`` for an upload,
    ``rename``, ``unlink``, ``mkdir``), so a :class:`FaultyIO` fails remote segment I/O
    like local I/O. Paths are reported as ``faultmem://<key>``. Objects survive a
    simulated power loss (an object store is durable once a request succeeded).
    """

    protocol = "faultmem"
    store: dict[str, Any] = {}  # separate from the plain memory filesystem's store
    pseudo_dirs = [""]
    io: FileIO | None = None

    def _hook(self, op: str, path: str, size: int = 0) -> None:
        if self.io is not None:
            key = str(path)
            while key.startswith("faultmem://"):
                key = key[len("faultmem://") :]
            self.io.before(op, "faultmem://" + key.lstrip("/"), None, size)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        self._hook("listdir", path)
        return super().ls(path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        self._hook("stat", path)
        return super().info(path, **kwargs)

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        self._hook("read", path)
        return super().cat_file(path, start=start, end=end, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        try:
            self._hook("write", path, len(value))
        except InjectedError as e:
            if e.fault.partial:  # the request died after part of the body was stored
                super().pipe_file(path, value[: len(value) // 2], mode=mode, **kwargs)
            raise
        super().pipe_file(path, value, mode=mode, **kwargs)

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> None:
        self._hook("rename", path2)
        super().mv(path1, path2, *args, **kwargs)

    def rm_file(self, path: str) -> None:
        self._hook("unlink", path)
        super().rm_file(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._hook("mkdir", path)
        super().makedirs(path, exist_ok=exist_ok)


fsspec.register_implementation(FaultyMemoryFS.protocol, FaultyMemoryFS, clobber=True)
