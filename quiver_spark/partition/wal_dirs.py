"""The partition directories of one machine's WAL root (``wal.path``; ARCHITECTURE.md
§1, §2): what each one's WAL holds, whether its writer still runs, and sealing the
committed data of those whose writer is gone (§9.3).

Each is ``<wal_root>/<pid>/`` with the partition's ``wal/``, ``STATE``, ``HEARTBEAT``
and ``LOCK``; listings and non-blocking ``flock`` probes tell a live writer from a gone
one. :class:`~quiver_spark.store.QuiverStore` asks these for its ``wal_bytes``,
``heartbeats`` and ``finalize_idle_partitions``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from .. import format as fmt
from .. import layout
from ..config import NAME_RE
from ..errors import CorruptionError, LockedError, QuiverError
from ..fs import FileIO, partition_locked
from .writer import PartitionWriter

log = logging.getLogger(__name__)


def wal_bytes(io: FileIO, wal_root: str) -> dict[str, int]:
    """WAL bytes on disk per partition (directory listings; no file is opened)."""
    out: dict[str, int] = {}
    for pid in io.listdir(wal_root):
        wal_dir = os.path.join(wal_root, layout.wal_dir(pid))
        total = 0
        for name in io.listdir(wal_dir):
            try:
                total += io.size(os.path.join(wal_dir, name))
            except FileNotFoundError:
                continue
        out[pid] = total
    return out


def heartbeats(io: FileIO, wal_root: str) -> dict[str, dict[str, Any]]:
    """Last heartbeat of each partition's writer, with ``live`` telling whether its
    lock is held."""
    out: dict[str, dict[str, Any]] = {}
    for pid in io.listdir(wal_root):
        path = os.path.join(wal_root, layout.partition_heartbeat(pid))
        try:
            body = fmt.decode_frame(path, fmt.MAGIC_HEARTBEAT, io.read_file(path))
        except (FileNotFoundError, CorruptionError):
            body = {"partition": pid}
        body["live"] = partition_locked(os.path.join(wal_root, layout.partition_lock(pid)))
        out[pid] = body
    return out


def seal_idle(
    io: FileIO,
    wal_root: str,
    open_sealer: Callable[[str], PartitionWriter],
    release: Callable[[str], None],
    *,
    skip: str | None,
    failures: dict[str, str],
) -> tuple[list[tuple[str, int]], set[str]]:
    """Seal the committed data of each partition but ``skip`` whose WAL holds files:
    ``open_sealer(pid)`` takes its lock (a held one, LockedError, is passed over) and
    recovers it, and closing it finalizes; ``release(pid)`` follows each close. One
    damaged partition never stops the rest: its failure is logged and kept in
    ``failures``. Returns ``(sealed, done)``: ``(partition, seq)`` of each segment
    sealed, and the partitions sealed without a failure."""
    sealed: list[tuple[str, int]] = []
    done: set[str] = set()
    for pid in io.listdir(wal_root):
        if pid == skip or not NAME_RE.fullmatch(pid):
            continue
        if not io.listdir(os.path.join(wal_root, layout.wal_dir(pid))):
            continue
        try:
            w = open_sealer(pid)
        except LockedError:
            continue
        except (QuiverError, OSError) as e:  # one damaged partition must not stop the rest
            log.error("quiver.finalize_idle.failed partition=%s: %s", pid, e)
            failures[pid] = str(e)
            continue
        try:
            w.close(finalize=True)
            if w.last_finalized is not None:
                sealed.append((pid, w.last_finalized.seq))
            done.add(pid)
        except (QuiverError, OSError) as e:
            log.error("quiver.finalize_idle.failed partition=%s: %s", pid, e)
            failures[pid] = str(e)
        finally:
            w.close(finalize=False)
            release(pid)
    return sealed, done
