"""Transaction records: every commit record ``commits/*.commit`` (ARCHITECTURE.md §10.1)
and, on an object root, every staged transaction ``partitions/<pid>/txns/<id>.txn``
(§10.2).
"""

from __future__ import annotations

from .. import format as fmt
from .. import layout, staging
from ..errors import CorruptionError
from .report import FindingKind, FsckRun, Task


def staged_tasks(run: FsckRun) -> list[Task]:
    """Object root: every staged transaction ``partitions/<pid>/txns/<id>.txn``
    (§10.2) verifies and names itself."""
    keys = [k for k in run.keys(layout.partitions_prefix()) if layout.is_staged_key(k)]
    return [(1, lambda key=key: _check_staged(run, key)) for key in keys]  # type: ignore[misc]


def _check_staged(run: FsckRun, key: str) -> None:
    checked = run.report.checked  # object roots only: counted once there is one
    checked["staged"] = checked.get("staged", 0) + 1
    shown = run.shown(key)
    pid = key.split("/")[1]
    try:
        st = staging.decode_staged(shown, run.read(key))
        stem = layout.staged_txn_stem(key.rsplit("/", 1)[-1])
        if (st.partition, str(st.txn_id).zfill(len(stem))) != (pid, stem):
            raise CorruptionError(
                shown, fmt.FRAME_SIZE, f"names transaction {st.txn_id} of {st.partition}"
            )
    except FileNotFoundError:
        return
    except OSError as e:
        run.problem(FindingKind.STAGED, shown, f"cannot read: {e}", partition=pid)
    except CorruptionError as e:
        run.problem(
            FindingKind.STAGED, e.path, f"{e.reason} (damaged staged transaction: if its batch was "
            "committed and its writer's machine is lost, its rows cannot be sealed; an "
            "observer pass leaves it, a live writer seals its rows from its WAL; a writer "
            "whose recovered WAL holds a transaction of this id keeps it pending, unresolved, "
            "until this object is repaired (rewritten intact, e.g. from a bucket version) or "
            "removed, which drops that transaction's rows even if its batch was committed)",
            offset=e.offset, partition=pid,
        )  # fmt: skip


def commit_tasks(run: FsckRun) -> list[Task]:
    """A task per commit record ``commits/*.commit`` (§10.1)."""
    keys = [k for k in run.keys(layout.commits_prefix()) if layout.is_commit_record(k)]
    return [(1, lambda key=key: _check_commit(run, key)) for key in keys]  # type: ignore[misc]


def _check_commit(run: FsckRun, key: str) -> None:
    run.report.checked["commits"] += 1
    path = run.shown(key)
    try:
        body = fmt.decode_frame(path, fmt.MAGIC_COMMIT, run.read(key))
        if "winners" not in body:
            raise CorruptionError(path, fmt.FRAME_SIZE, "commit record lacks 'winners'")
    except FileNotFoundError:
        return
    except OSError as e:
        run.problem(FindingKind.COMMIT, path, f"cannot read: {e}")
    except CorruptionError as e:
        run.corruption(FindingKind.COMMIT, e)
