"""The root's control objects: STORE, POLICY and its copy, each partition's MANIFEST
and every lease (ARCHITECTURE.md §7.1, §7.2, §11.1, §8.2).

A damaged STORE, POLICY, MANIFEST or lease is a problem; a damaged or missing POLICY
copy is a warning (only repair reads it); a lease released, expired or held is a note.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import format as fmt
from .. import layout, policy
from ..config import NAME_RE
from ..control.lease import decode_lease
from ..control.manifest import Manifest
from ..errors import CorruptionError, QuiverError
from .report import FindingKind, FsckRun
from .segments import has_segment_files


def control_partitions(run: FsckRun) -> list[str]:
    """Partitions with an object under ``partitions/`` of the root (MANIFEST, LEASE)."""
    keys = run.keys(layout.partitions_prefix())
    names = {p for k in keys if (p := layout.partition_of(k)) is not None}
    return sorted(n for n in names if NAME_RE.fullmatch(n))


def check_store_file(run: FsckRun) -> None:
    """The STORE descriptor (§7.1): it decodes and names its format and uuid."""
    path = run.shown(layout.store_descriptor())
    try:
        body = fmt.decode_frame(path, fmt.MAGIC_STORE, run.read(layout.store_descriptor()))
        for key in ("format", "uuid"):
            if key not in body:
                raise CorruptionError(path, fmt.FRAME_SIZE, f"STORE lacks {key!r}")
    except CorruptionError as e:
        run.corruption(FindingKind.STORE, e)
    except FileNotFoundError:
        run.problem(FindingKind.STORE, path, "missing")
    run.report.checked["store"] += 1


def check_policy(run: FsckRun) -> None:
    """POLICY and its copy ``POLICY.copy`` (§7.2)."""
    root = run.store.root
    path, copy = run.shown(layout.policy()), run.shown(layout.policy_copy())
    run.report.checked["policy"] += 1
    try:
        recorded = policy.read_recorded(run.store.objects)
    except OSError as e:
        run.problem(FindingKind.POLICY, path, f"cannot read: {e}")
        return
    except CorruptionError as e:
        run.problem(
            FindingKind.POLICY, e.path, f"{e.reason}; every process applies the most conservative "
            f"policy until it is repaired with: {policy.repair_hint(root)}", offset=e.offset,
        )  # fmt: skip
        recorded = None
    else:
        if recorded is None:
            run.warning(
                FindingKind.POLICY, path, "none recorded (a store from before POLICY existed): the "
                "next writer records its options as the store's policy",
            )  # fmt: skip
            return
    try:
        fmt.decode_frame(copy, fmt.MAGIC_POLICY, run.read(policy.POLICY_COPY_FILE))
    except FileNotFoundError:
        if recorded is not None:
            run.warning(
                FindingKind.POLICY_COPY, copy, "missing: a damaged POLICY could only be repaired from "
                f"explicit values; write it with: quiver config {root} repair",
            )  # fmt: skip
        return
    except OSError as e:
        run.warning(FindingKind.POLICY_COPY, copy, f"cannot read: {e} (only repair reads it)")
        return
    except CorruptionError as e:
        fix = f"quiver config {root} repair" if recorded else "repair POLICY with KEY=VALUE"
        run.warning(
            FindingKind.POLICY_COPY, e.path, f"{e.reason} (only repair reads it; rewrite it with: "
            f"{fix})", offset=e.offset,
        )  # fmt: skip
    run.report.checked["policy"] += 1


def check_manifest(run: FsckRun, pid: str) -> None:
    """``partitions/<pid>/MANIFEST``: it decodes, and it agrees with what is
    published (an entry's ``.meta`` exists; a ``.meta`` it lacks is one readers find
    by probing after its ``high``, or one it records deleted)."""
    key = layout.manifest(pid)
    shown = run.shown(key)
    first = _manifest_disagreements(run, pid, key, shown)
    if not first:
        return
    again = _manifest_disagreements(run, pid, key, shown, count=False)  # a pass ran?
    for level, seq, reason in again:
        if (level, seq, reason) in first or level == "damaged":
            if level == "warning":
                run.warning(FindingKind.MANIFEST, shown, reason, partition=pid, seq=seq)
            else:
                run.problem(FindingKind.MANIFEST, shown, reason, partition=pid, seq=seq)


def check_gone(run: FsckRun, pid: str) -> None:
    """``partitions/<pid>/GONE`` (object roots, §15.4): absent, or it decodes and names
    its partition. Damaged it is a warning: the MANIFEST holds the same facts, and the
    next removal of a segment writes the copy again."""
    key = layout.gone(pid)
    shown = run.shown(key)
    raw = _read_if_present(run, key, run.warning, FindingKind.GONE, pid)
    if raw is None:
        return
    try:
        kept = Manifest.decode(shown, raw, magic=fmt.MAGIC_GONE)
        if kept.partition != pid:
            raise CorruptionError(shown, fmt.FRAME_SIZE, f"names partition {kept.partition}")
    except CorruptionError as e:
        run.warning(
            FindingKind.GONE, shown, f"{e.reason} (the MANIFEST holds the same facts; the "
            "next retention pass that removes a segment writes it again)", partition=pid,
        )  # fmt: skip


def _manifest_disagreements(
    run: FsckRun, pid: str, key: str, shown: str, *, count: bool = True
) -> list[tuple[str, int | None, str]]:
    try:
        raw = run.read(key)
    except FileNotFoundError:
        if count and has_segment_files(run, pid):
            run.warning(
                FindingKind.MANIFEST, shown, "missing while the partition has segments: readers "
                "list the partition, and the next reader or writer writes it from the "
                "listing", partition=pid,
            )  # fmt: skip
        return []
    except OSError as e:
        return [("damaged", None, f"cannot read: {e}")]
    if count:
        run.report.checked["manifests"] += 1
    try:
        m = Manifest.decode(shown, raw)
        if m.partition != pid:
            raise CorruptionError(shown, fmt.FRAME_SIZE, f"names partition {m.partition}")
    except CorruptionError as e:
        return [
            (
                "damaged", None, f"{e.reason} (readers list the partition instead; its "
                "next writer or retention pass rewrites it)",
            )
        ]  # fmt: skip
    loc = run.store.segment_location
    try:
        published = set(loc.listing(pid).published)
    except (OSError, QuiverError):
        return []  # the segment checks report the listing
    out: list[tuple[str, int | None, str]] = []
    live = set(m.seqs())
    named = {
        f.seq
        for f in run.report.problems
        if f.kind is FindingKind.SEGMENT_META and f.partition == pid
    }  # a .meta gone with its .arrow left: named by the segment checks already
    for seq in sorted(live - published - named):
        out.append(
            (
                "problem", seq, f"lists segment {seq}, whose .meta is missing: readers "
                "count it missing",
            )
        )  # fmt: skip
    probed = m.high + 1
    while probed in published:
        probed += 1
    for seq in sorted(published - live):
        if seq > m.high and seq < probed:
            out.append(
                (
                    "warning", seq, f"segment {seq} was published after the manifest's "
                    f"high {m.high} and is not in it yet (readers find it by probing; "
                    "the partition's next writer adds it)",
                )
            )  # fmt: skip
        elif m.deleted(seq):
            out.append(
                (
                    "warning", seq, f"records segment {seq} deleted, but its .meta remains "
                    "(a deletion stopped between its steps; readers do not see it)",
                )
            )  # fmt: skip
        else:
            out.append(
                (
                    "problem", seq, f"lacks published segment {seq} (high {m.high}): new "
                    "readers do not see it",
                )
            )  # fmt: skip
    return out


def check_lease(run: FsckRun, key: str, pid: str | None = None) -> None:
    """A lease object (§8.2): a damaged one is a problem (its next claimant must
    wait out its time to live); a released or expired one is only noted."""
    shown = run.shown(key)
    raw = _read_if_present(run, key, run.problem, FindingKind.LEASE, pid)
    if raw is None:
        return
    run.report.checked["leases"] += 1
    try:
        body = decode_lease(shown, raw)
    except CorruptionError as e:
        run.problem(
            FindingKind.LEASE, e.path, f"{e.reason} (its next claimant waits the lease's time to "
            "live, then takes it over with a higher epoch)", offset=e.offset, partition=pid,
        )  # fmt: skip
        return
    holder = body.holder
    if body.released:
        run.note(
            FindingKind.LEASE, shown, f"released at epoch {body.epoch} by {holder.describe()} "
            "(the next claimant takes it at once)", partition=pid,
        )  # fmt: skip
    elif holder.dead_here():
        run.note(
            FindingKind.LEASE, shown, f"expired: its holder, {holder.describe()}, is gone (the next "
            f"claimant takes it over at once with epoch {body.epoch + 1})", partition=pid,
        )  # fmt: skip
    else:
        run.note(
            FindingKind.LEASE, shown, f"held at epoch {body.epoch} by {holder.describe()} (expired "
            f"if not renewed within {holder.ttl_s:g}s)", partition=pid,
        )  # fmt: skip


def _read_if_present(
    run: FsckRun, key: str, report: Callable[..., object], kind: FindingKind, pid: str | None
) -> bytes | None:
    """Object ``key``'s bytes; None when it is absent, or when it cannot be read (then
    reported through ``report`` as ``kind``)."""
    try:
        return run.read(key)
    except FileNotFoundError:
        return None
    except OSError as e:
        report(kind, run.shown(key), f"cannot read: {e}", partition=pid)
        return None
