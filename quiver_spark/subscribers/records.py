"""Subscription records: each subscriber's visible life (ARCHITECTURE.md §8.10).

``<root>/subscribers/records/<name>.sub`` (a §6 frame, magic ``QSUB``) says when a
subscriber was registered, when it last acknowledged, when a consumer was last seen
holding it live, and whether the store expired it (policy ``subscriber.expire_after``,
counted from the later of the last acknowledgement and the last time it was live),
and the subscriber's done count in the ack log as the record last knew it, so that a
pass never expires on a record whose writes failed while acknowledgements went on
(the ack log ahead of ``progress`` restarts the clock). The ack log stays the truth of progress; a
record adds what an operator needs to see an idle subscriber pinning bytes, and the
tombstone that makes a later query under an expired name fail clearly instead of
silently starting over.

Each record is written by one party at a time: created exclusively at registration,
replaced by the subscriber's live consumer (which holds the subscriber's lock) or by
a retention pass (under the ack log's exclusive lock) that expires it or notes it live.
Both only ever move a time forward, so a lost update between the two leaves a time
no older than the other party's. On an object
store the same body maps to a create-if-absent and a conditional replace.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from .. import format as fmt
from ..config import validate_name
from ..errors import CorruptionError
from ..fs import FileIO
from .live import is_live as is_live  # where the status and expiry code look for it

log = logging.getLogger(__name__)

RECORDS_DIR = "records"
RECORD_SUFFIX = ".sub"
MAGIC_SUBSCRIPTION = b"QSUB"


@dataclass(frozen=True)
class SubscriptionRecord:
    """One subscriber's life: registered, last acknowledged, last live, expired."""

    name: str
    created_ns: int
    last_ack_ns: int | None = None
    expired_ns: int | None = None
    expired_after_s: float | None = None
    last_live_ns: int | None = None
    progress: int | None = None
    """Its done count in the ack log (:meth:`SubscriberRegistry.done_count`) when this
    record was last written with it; None: not known (records from before the key)."""
    progress_ns: int | None = None
    """When a retention pass found the ack log ahead of ``progress``: acknowledgements
    this record missed (its writes failed), so it counts as active from then."""

    @property
    def last_active_ns(self) -> int:
        """The latest of its registration, last acknowledgement, last time live and
        the last time a pass found progress the record had missed."""
        return max(
            self.created_ns, self.last_ack_ns or 0, self.last_live_ns or 0, self.progress_ns or 0
        )

    def missed_progress(self, done: int) -> bool:
        """True when the ack log's ``done`` count differs from what this record knows:
        it may be stale, so nothing may be decided on its times alone (§8.10)."""
        return self.progress != done

    def to_body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "created_ns": self.created_ns,
            "last_ack_ns": self.last_ack_ns,
            "expired_ns": self.expired_ns,
            "expired_after_s": self.expired_after_s,
            "last_live_ns": self.last_live_ns,
            "progress": self.progress,
            "progress_ns": self.progress_ns,
        }

    @classmethod
    def from_body(cls, path: str, body: dict[str, Any]) -> SubscriptionRecord:
        try:
            return cls(
                name=str(body["name"]),
                created_ns=int(body["created_ns"]),
                last_ack_ns=None if body.get("last_ack_ns") is None else int(body["last_ack_ns"]),
                expired_ns=None if body.get("expired_ns") is None else int(body["expired_ns"]),
                expired_after_s=(
                    None if body.get("expired_after_s") is None else float(body["expired_after_s"])
                ),
                last_live_ns=(  # absent from records written before it existed
                    None if body.get("last_live_ns") is None else int(body["last_live_ns"])
                ),
                progress=None if body.get("progress") is None else int(body["progress"]),
                progress_ns=None if body.get("progress_ns") is None else int(body["progress_ns"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"invalid subscription record: {e}") from e


def records_dir(root: str) -> str:
    return os.path.join(root, fmt.SUBSCRIBERS_DIR, RECORDS_DIR)


def record_path(root: str, name: str) -> str:
    return os.path.join(records_dir(root), validate_name("subscriber", name) + RECORD_SUFFIX)


def read_record(root: str, io: FileIO, name: str) -> SubscriptionRecord | None:
    path = record_path(root, name)
    try:
        raw = io.read_file(path)
    except FileNotFoundError:
        return None
    return SubscriptionRecord.from_body(path, fmt.decode_frame(path, MAGIC_SUBSCRIPTION, raw))


def read_record_or_none(root: str, io: FileIO, name: str) -> SubscriptionRecord | None:
    """:func:`read_record`, with a damaged record logged and treated as absent (the
    views that show records must not fail on one of them)."""
    try:
        return read_record(root, io, name)
    except CorruptionError as e:
        log.warning("quiver.subscriber.record_damaged subscriber=%s: %s", name, e)
        return None


def list_records(root: str, io: FileIO) -> dict[str, SubscriptionRecord]:
    """Every readable record by name (a damaged one is skipped: records are advisory
    for everything but expiry, which then simply does not happen for that name)."""
    out: dict[str, SubscriptionRecord] = {}
    for entry in io.listdir(records_dir(root)):
        if not entry.endswith(RECORD_SUFFIX):
            continue
        try:
            rec = read_record(root, io, entry[: -len(RECORD_SUFFIX)])
        except (CorruptionError, ValueError):
            continue
        if rec is not None:
            out[rec.name] = rec
    return out


def create_record(
    root: str, io: FileIO, name: str, now_ns: int | None = None, *, progress: int | None = None
) -> bool:
    """Record a new registration (``progress``: its done count in the ack log now);
    False if a record exists (it is left as it is)."""
    io.mkdir(records_dir(root))
    rec = SubscriptionRecord(name, time.time_ns() if now_ns is None else now_ns, progress=progress)
    body = fmt.encode_frame(MAGIC_SUBSCRIPTION, rec.to_body())
    return io.create_exclusive(record_path(root, name), body)


def write_record(root: str, io: FileIO, rec: SubscriptionRecord) -> None:
    io.mkdir(records_dir(root))
    io.atomic_write(
        record_path(root, rec.name), fmt.encode_frame(MAGIC_SUBSCRIPTION, rec.to_body())
    )


def touch(
    root: str,
    io: FileIO,
    name: str,
    now_ns: int | None = None,
    *,
    progress: int | None = None,
) -> SubscriptionRecord:
    """Note an acknowledgement by ``name``'s live consumer, with its done count in the
    ack log after it (a damaged record is replaced: the consumer is registered and
    acknowledging, which is what it says)."""
    now = time.time_ns() if now_ns is None else now_ns
    rec = read_record_or_none(root, io, name) or SubscriptionRecord(name, now)
    rec = dataclasses.replace(rec, last_ack_ns=now)
    if progress is not None:
        rec = dataclasses.replace(rec, progress=progress)
    write_record(root, io, rec)
    return rec


def note_live(
    root: str,
    io: FileIO,
    name: str,
    now_ns: int | None = None,
    *,
    progress: int | None = None,
) -> SubscriptionRecord | None:
    """Note that a consumer held ``name`` live at ``now_ns`` (its consumer when it
    stops, a retention pass that sees it live), with its done count in the ack log
    when given. Only an existing, unexpired record is updated (a name never registered
    gets no record); None when nothing was written."""
    now = time.time_ns() if now_ns is None else now_ns
    rec = read_record_or_none(root, io, name)
    if rec is None or rec.expired_ns is not None or (rec.last_live_ns or 0) >= now:
        return None
    rec = dataclasses.replace(rec, last_live_ns=now)
    if progress is not None:
        rec = dataclasses.replace(rec, progress=progress)
    write_record(root, io, rec)
    return rec


def remove_record(root: str, io: FileIO, name: str) -> None:
    path = record_path(root, name)
    if io.exists(path):
        io.durable_unlink([path])


def unregistered(root: str, io: FileIO, registered: set[str] | list[str]) -> list[str]:
    """Names with an unexpired record that ``registered`` (the ack log's subscribers)
    lacks: the ack log lost their registration (§8.10), so retention keeps their data."""
    known = set(registered)
    recs = list_records(root, io)
    return sorted(n for n, rec in recs.items() if rec.expired_ns is None and n not in known)


def unregistered_message(root: str, name: str) -> str:
    """What ``quiver status`` and ``quiver fsck`` say about such a subscriber."""
    return (
        f"subscriber {name} has a subscription record but is not registered in the ack log "
        "(a damaged or cut ack log?): retention keeps every segment it may not have read; "
        f"`quiver subscribers {root} add {name}` registers it again (from the earliest "
        f"retained segment), `quiver subscribers {root} remove {name}` releases its data"
    )
