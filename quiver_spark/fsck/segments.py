"""Published segments: every ``.meta`` and ``.arrow`` (size, CRC-32C, Arrow footer,
schema, every batch decodable), segment files never published, the quarantine mark,
and quarantining a corrupt segment (ARCHITECTURE.md §5).

With ``quarantine`` each corrupt segment is moved to
``<segments>/<partition>/quarantine/`` under the partition's writer lock (a LEASE on an
object root); a partition with a live writer is skipped and says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import format as fmt
from .. import layout
from ..control.lease import Lease
from ..errors import CorruptionError, LockedError, QuiverError, SegmentMissingError
from ..fs import PartitionLock
from ..segment import SegmentMeta
from .report import Finding, FindingKind, FsckRun, Task


def segment_partitions(run: FsckRun) -> list[str]:
    """The partitions of the segments location (a listing failure is a problem)."""
    try:
        return run.store.partitions()
    except (OSError, QuiverError) as e:
        run.problem(FindingKind.SEGMENT, run.store.segments_url, f"cannot list partitions: {e}")
        return []


def has_segment_files(run: FsckRun, pid: str) -> bool:
    """Whether partition ``pid`` has any segment file, published or not."""
    try:
        listing = run.store.segment_location.listing(pid)
    except (OSError, QuiverError):
        return False
    return bool(listing.published or listing.unpublished)


def segment_tasks(run: FsckRun, pid: str) -> list[Task]:
    """Partition ``pid``'s segment files without metadata, judged at once against
    STATE, and a task per published segment (its ``.meta`` read now)."""
    loc = run.store.segment_location
    listing = loc.listing(pid)
    floor, publishing = _state_floor(run, pid)
    for seq in listing.unpublished:
        if seq == publishing:
            run.warning(
                FindingKind.SEGMENT_PENDING, loc.data_path(pid, seq),
                "segment committed in STATE but not yet published (the partition's next "
                "writer publishes it; do not remove it)", partition=pid, seq=seq,
            )  # fmt: skip
            continue
        if seq < floor:
            run.problem(
                FindingKind.SEGMENT_META, loc.data_path(pid, seq),
                f"its .meta is missing: segment {seq} was published (the partition's "
                f"next seq is {floor}), so readers count it missing; the partition's next "
                "writer deletes this .arrow (copy it away first to keep its rows)",
                partition=pid, seq=seq,
            )  # fmt: skip
            continue
        run.warning(
            FindingKind.SEGMENT_ORPHAN, loc.data_path(pid, seq),
            "segment file without metadata: never published (recovery removes it)",
            partition=pid, seq=seq,
        )  # fmt: skip
    tasks: list[Task] = []
    for seq in listing.published:
        try:
            meta = loc.read_meta(pid, seq)
        except SegmentMissingError:
            continue  # deleted by retention since the listing
        except CorruptionError as e:
            f = run.corruption(FindingKind.SEGMENT_META, e, partition=pid, seq=seq)
            tasks.append((1, lambda f=f: _maybe_quarantine(run, f)))  # type: ignore[misc]
            run.report.checked["segments"] += 1
            continue
        tasks.append((max(1, meta.size_bytes), _segment_task(run, meta)))
    return tasks


def _state_floor(run: FsckRun, pid: str) -> tuple[int, int | None]:
    """STATE's next seq and the seq being published (0, None when unreadable: every
    segment file without metadata is then taken as never published)."""
    path = os.path.join(run.store.wal_root, layout.partition_state(pid))
    try:
        body = fmt.decode_frame(path, fmt.MAGIC_STATE, run.store.io.read_file(path))
        publishing = body.get("publishing") or {}
        seq = publishing.get("seq")
        return int(body["next_seq"]), int(seq) if seq is not None else None
    except (OSError, CorruptionError, KeyError, TypeError, ValueError):
        return 0, None


def _segment_task(run: FsckRun, meta: SegmentMeta) -> Callable[[], None]:
    def work() -> None:
        run.report.checked["segments"] += 1
        run.report.checked["segment_bytes"] += meta.size_bytes
        loc = run.store.segment_location
        try:
            with loc.open(meta, verify=True) as reader:
                for i in range(reader.num_batches):
                    reader.read_batch(i).validate(full=True)
        except SegmentMissingError as e:
            if not loc.is_published(meta.partition, meta.seq):
                return  # deleted by retention while we checked
            f = run.problem(
                FindingKind.SEGMENT, _arrow_path(run, meta), f"published but {e}",
                partition=meta.partition, seq=meta.seq,
            )  # fmt: skip
            _maybe_quarantine(run, f)
        except CorruptionError as e:
            f = run.corruption(FindingKind.SEGMENT, e, partition=meta.partition, seq=meta.seq)
            _maybe_quarantine(run, f)
        except Exception as e:  # an Arrow validation error on a checksummed file
            f = run.problem(
                FindingKind.SEGMENT, _arrow_path(run, meta), f"invalid Arrow data: {e}",
                partition=meta.partition, seq=meta.seq,
            )  # fmt: skip
            _maybe_quarantine(run, f)

    return work


def check_quarantine_mark(run: FsckRun) -> None:
    loc = run.store.segment_location
    try:
        raw = loc.quarantine_mark()
    except (OSError, QuiverError) as e:
        run.problem(FindingKind.QUARANTINE_MARK, run.store.segments_url, f"cannot read: {e}")
        return
    counted = 0
    for pid in _listed_partitions(run):
        counted += len(loc.quarantined(pid))
    run.report.checked["quarantined_segments"] += counted
    if raw is None:
        if counted:
            run.warning(
                FindingKind.QUARANTINE_MARK, os.path.join(run.store.segments_url,
                layout.quarantine_mark()), f"missing though {counted} segment(s) are "
                "quarantined: running readers notice a quarantine by their full listing "
                "(within 5 minutes) until the next quarantine writes it again",
            )  # fmt: skip
        return
    run.report.checked["advisory_files"] += 1
    path = os.path.join(run.store.segments_url, layout.quarantine_mark())
    try:
        fmt.decode_frame(path, fmt.MAGIC_QUARANTINE_MARK, raw)
    except CorruptionError as e:
        run.warning(
            FindingKind.QUARANTINE_MARK, e.path, f"{e.reason} (readers compare its bytes only, so "
            "it still signals a change; the next quarantine replaces it)", offset=e.offset,
        )  # fmt: skip


def _listed_partitions(run: FsckRun) -> list[str]:
    try:
        return run.store.partitions()
    except (OSError, QuiverError):
        return []  # already a finding of the segment listing


def _arrow_path(run: FsckRun, meta: SegmentMeta) -> str:
    return run.store.segment_location.data_path(meta.partition, meta.seq)


def _maybe_quarantine(run: FsckRun, f: Finding) -> None:
    if not run.quarantine or f.partition is None or f.seq is None:
        return
    lock: PartitionLock | Lease | None = None
    try:  # the partition's writers kept out, as a writer takes it
        lock = run.store.kind.hold_partition(f.partition, "quiver fsck --quarantine")
        moved = run.store.segment_location.quarantine(f.partition, f.seq, f.line())
    except LockedError as e:
        f.action = f"not quarantined: {e}"
        return
    except (OSError, QuiverError) as e:
        f.action = f"not quarantined: {e}"
        return
    finally:
        if lock is not None:
            lock.release()
    f.action = f"quarantined to {moved}"
    run.report.quarantined += 1
