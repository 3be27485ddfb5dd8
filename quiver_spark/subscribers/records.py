"""Subscription records: each subscriber's visible life (ARCHITECTURE.md §13.8).

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

Its wall-clock times (``*_ns`` written by whichever machine wrote the record) are for
display only. Expiry measures idleness on the storage's clock alone: every write that
is the subscriber's activity (registration, acknowledgement, live note, a progress
rewrite) leaves ``activity_carried_ns`` nil, so the record's own modification time as
the storage stamped it (:attr:`SubscriptionRecord.stored_ns`) is when it was last
active; a write that is not activity (progress after a drop, a tombstone, taking one
back) carries the storage time of the last activity over in ``activity_carried_ns``.

Each record is an object under ``subscribers/records/`` on any root (ARCHITECTURE.md
§2.3): created if absent at registration, then updated by the subscriber's live
consumer (which holds the subscriber's lock) or by a retention pass (under the ack
log's exclusive lock) that notes it live, each update a replace conditional on the
version read, applied again to what the other party wrote when it came first; so
neither party's time is lost. An expiry tombstone or a registration started over is
written whole (``put``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import format as fmt
from .. import layout
from ..config import validate_name
from ..control import cas
from ..errors import CorruptionError, ObjectExists, SubscriberError
from ..objects import ObjectStore, Stored
from ..objects.writes import retry_conflicts

log = logging.getLogger(__name__)


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
    activity_carried_ns: int | None = None
    """Set by a write that is not the subscriber's activity: the storage's time of its
    last activity, carried over from the version that write replaced; None: the
    version's own :attr:`stored_ns` is that time (§13.8, the expiry clock)."""
    expired_stored_ns: int | None = None
    """With ``expired_ns``: the storage's clock when the pass decided to expire it."""
    horizon_dropped_segments: int = 0
    """Segments its consumers recorded ``dropped`` as past their acceptance horizon
    (:mod:`quiver_spark.subscription.horizon`), as far as this record heard; advisory: the ack log
    holds the outcomes, not their reason."""
    horizon_dropped_rows: int = 0
    """The rows of those segments."""
    stored_ns: int | None = dataclasses.field(default=None, compare=False)
    """When the storage says the version read was written (its own clock); not
    written into the record. None: a record not read from the storage, or a storage
    that keeps no modification times."""

    @property
    def last_active_ns(self) -> int:
        """The latest of its registration, last acknowledgement, last time live and
        the last time a pass found progress the record had missed (wall clocks of
        the machines that wrote them: for display; expiry uses :attr:`activity_stored_ns`)."""
        return max(
            self.created_ns, self.last_ack_ns or 0, self.last_live_ns or 0, self.progress_ns or 0
        )

    @property
    def activity_stored_ns(self) -> int | None:
        """The storage's time of the subscriber's last activity (None: not known)."""
        if self.activity_carried_ns is not None:
            return self.activity_carried_ns
        return self.stored_ns

    def quietly(self, **changes: Any) -> SubscriptionRecord:
        """This record with ``changes``, written by a write that is not the subscriber's
        activity: the storage time of its last activity is carried over."""
        return dataclasses.replace(self, activity_carried_ns=self.activity_stored_ns, **changes)

    def active(self, **changes: Any) -> SubscriptionRecord:
        """This record with ``changes``, written as the subscriber's activity: the
        write's own modification time is its last activity."""
        return dataclasses.replace(self, activity_carried_ns=None, **changes)

    def missed_progress(self, done: int) -> bool:
        """True when the ack log's ``done`` count differs from what this record knows:
        it may be stale, so nothing may be decided on its times alone (§13.8)."""
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
            "activity_carried_ns": self.activity_carried_ns,
            "expired_stored_ns": self.expired_stored_ns,
        } | (  # only once a horizon dropped something: other records keep their bytes
            {
                "horizon_dropped_segments": self.horizon_dropped_segments,
                "horizon_dropped_rows": self.horizon_dropped_rows,
            }
            if self.horizon_dropped_segments or self.horizon_dropped_rows
            else {}
        )

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
                activity_carried_ns=_opt_int(body, "activity_carried_ns"),
                expired_stored_ns=_opt_int(body, "expired_stored_ns"),
                horizon_dropped_segments=_opt_int(body, "horizon_dropped_segments") or 0,
                horizon_dropped_rows=_opt_int(body, "horizon_dropped_rows") or 0,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"invalid subscription record: {e}") from e


def _opt_int(body: dict[str, Any], key: str) -> int | None:
    """An int key absent from records written before it existed: None."""
    return None if body.get(key) is None else int(body[key])


def records_dir(root: str) -> str:
    return os.path.join(root, layout.records_dir())


RECORDS_PREFIX = layout.records_prefix()
CLOCK_KEY = layout.records_clock()
"""The probe whose modification time is the storage's "now" for expiry (§13.8): an
empty object, rewritten by retention passes; never a record (no ``.sub``)."""


def record_key(name: str) -> str:
    return layout.subscriber_record(validate_name("subscriber", name))


def record_path(root: str, name: str) -> str:
    return os.path.join(root, record_key(name))


def _encode(rec: SubscriptionRecord) -> bytes:
    return fmt.encode_frame(fmt.MAGIC_SUBSCRIPTION, rec.to_body())


def _decode(objects: ObjectStore, name: str, got: Stored) -> SubscriptionRecord:
    path = objects.display(record_key(name))
    body = fmt.decode_frame(path, fmt.MAGIC_SUBSCRIPTION, got.data)
    return dataclasses.replace(SubscriptionRecord.from_body(path, body), stored_ns=got.modified_ns)


def read_record(objects: ObjectStore, name: str) -> SubscriptionRecord | None:
    got = objects.get(record_key(name))
    return None if got is None else _decode(objects, name, got)


def read_record_or_none(objects: ObjectStore, name: str) -> SubscriptionRecord | None:
    """:func:`read_record`, with a damaged record logged and treated as absent (the
    views that show records must not fail on one of them)."""
    try:
        return read_record(objects, name)
    except CorruptionError as e:
        log.warning("quiver.subscriber.record_damaged subscriber=%s: %s", name, e)
        return None


def tombstoned(objects: ObjectStore, name: str) -> bool:
    """Whether the subscriber's record says expired (a damaged one does not)."""
    rec = read_record_or_none(objects, name)
    return rec is not None and rec.expired_ns is not None


def refuse_if_expired(objects: ObjectStore, root: str, name: str) -> None:
    """Refuse (SubscriberError, in one line saying how to start it over) a consumer of
    subscriber ``name`` whose record says the store at ``root`` expired it, or whose
    record is damaged so that whether it was expired cannot be told."""
    try:
        rec = read_record(objects, name)
    except CorruptionError as e:
        raise SubscriberError(
            f"subscriber {name!r} is not registered and its record is damaged "
            f"({e}), so whether the store expired it cannot be told; to start it over: "
            f"quiver subscribers {root} remove {name}, then add it"
        ) from e
    if rec is None or rec.expired_ns is None:
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(rec.expired_ns / 1e9))
    raise SubscriberError(
        f"subscriber {name!r} expired at {when}: it had not acknowledged for "
        f"longer than subscriber.expire_after ({rec.expired_after_s or 0:.0f}s), so the "
        "store deregistered it and released what it pinned. To start it over from the "
        f"retained data: quiver subscribers {root} add {name}"
    )


def list_records(objects: ObjectStore) -> dict[str, SubscriptionRecord]:
    """Every readable record by name (a damaged one is skipped: records are advisory
    for everything but expiry, which then simply does not happen for that name)."""
    out: dict[str, SubscriptionRecord] = {}
    for info in objects.list(RECORDS_PREFIX):
        name = layout.parse_subscriber_record(info.key)
        if name is None:
            continue
        try:
            rec = read_record(objects, name)
        except (CorruptionError, ValueError):
            continue
        if rec is not None:
            out[rec.name] = rec
    return out


def create_record(
    objects: ObjectStore, name: str, now_ns: int | None = None, *, progress: int | None = None
) -> bool:
    """Record a new registration (``progress``: its done count in the ack log now),
    created if absent; False if a record exists (it is left as it is)."""
    rec = SubscriptionRecord(name, time.time_ns() if now_ns is None else now_ns, progress=progress)
    data = _encode(rec)
    try:
        retry_conflicts(lambda: objects.create(record_key(name), data))
    except ObjectExists:
        return False
    return True


def write_record(objects: ObjectStore, rec: SubscriptionRecord) -> None:
    """Write ``rec`` whole, whatever the record holds (a registration started over, an
    expiry tombstone written under the ack log's exclusive lock)."""
    data = _encode(rec)
    retry_conflicts(lambda: objects.put(record_key(rec.name), data))


def update_record(
    objects: ObjectStore,
    name: str,
    change: Callable[[SubscriptionRecord | None], SubscriptionRecord | None],
) -> SubscriptionRecord | None:
    """Read ``name``'s record (None: missing or damaged, logged), apply ``change`` and
    write the result conditional on the version read (a missing record: created if
    absent); when another party wrote first, read again and apply again. ``change``
    returning None writes nothing. Returns what was written (or None)."""
    key = record_key(name)

    def decode(got: Stored) -> SubscriptionRecord | None:
        try:
            return _decode(objects, name, got)
        except CorruptionError as e:
            log.warning("quiver.subscriber.record_damaged subscriber=%s: %s", name, e)
            return None

    written = cas.update(
        objects,
        key,
        change,
        decode=decode,
        encode=_encode,
        give_up=lambda _: OSError(
            f"{objects.display(key)} kept changing under the write; the next update retries"
        ),
    )
    return None if written is None else written.value


def touch(
    objects: ObjectStore,
    name: str,
    now_ns: int | None = None,
    *,
    progress: int | None = None,
) -> SubscriptionRecord:
    """Note an acknowledgement by ``name``'s live consumer, with its done count in the
    ack log after it (a damaged record is replaced: the consumer is registered and
    acknowledging, which is what it says)."""
    now = time.time_ns() if now_ns is None else now_ns

    def change(rec: SubscriptionRecord | None) -> SubscriptionRecord:
        rec = rec or SubscriptionRecord(name, now)
        rec = rec.active(last_ack_ns=now)
        if progress is not None:
            rec = dataclasses.replace(rec, progress=progress)
        return rec

    written = update_record(objects, name, change)
    assert written is not None
    return written


def note_horizon_drops(
    objects: ObjectStore, name: str, segments: int, rows: int, *, progress: int | None = None
) -> SubscriptionRecord:
    """Add ``segments`` (of ``rows`` rows) that ``name``'s live consumer just recorded
    ``dropped`` past its acceptance horizon, with its done count after them (the drop
    is its activity, as an acknowledgement is)."""
    now = time.time_ns()

    def change(rec: SubscriptionRecord | None) -> SubscriptionRecord:
        rec = rec or SubscriptionRecord(name, now)
        rec = rec.active(
            horizon_dropped_segments=rec.horizon_dropped_segments + segments,
            horizon_dropped_rows=rec.horizon_dropped_rows + rows,
        )
        if progress is not None:
            rec = dataclasses.replace(rec, progress=progress)
        return rec

    written = update_record(objects, name, change)
    assert written is not None
    return written


def note_live(
    objects: ObjectStore,
    name: str,
    now_ns: int | None = None,
    *,
    progress: int | None = None,
) -> SubscriptionRecord | None:
    """Note that a consumer held ``name`` live at ``now_ns`` (its consumer when it
    stops, a retention pass that sees it live), with its done count in the ack log
    when given. Only an existing, unexpired record is updated (a name never registered
    gets no record); None when nothing was written. The note is written whatever
    ``last_live_ns`` says (a wall time another machine may have written ahead of this
    one's): its write is the activity expiry counts from; ``last_live_ns`` only moves
    forward."""
    now = time.time_ns() if now_ns is None else now_ns

    def change(rec: SubscriptionRecord | None) -> SubscriptionRecord | None:
        if rec is None or rec.expired_ns is not None:
            return None
        rec = rec.active(last_live_ns=max(now, rec.last_live_ns or 0))
        if progress is not None:
            rec = dataclasses.replace(rec, progress=progress)
        return rec

    return update_record(objects, name, change)


def remove_record(objects: ObjectStore, name: str) -> None:
    key = record_key(name)
    if objects.head(key) is not None:
        objects.delete(key)


def unregistered(objects: ObjectStore, registered: Iterable[str]) -> list[str]:
    """Names with an unexpired record that ``registered`` (the ack log's subscribers)
    lacks: the ack log lost their registration (§13.8), so retention keeps their data."""
    known = set(registered)
    out = []
    for info in objects.list(RECORDS_PREFIX):  # only the records of other names are read
        name = layout.parse_subscriber_record(info.key)
        if name is None:
            continue
        if name in known:
            continue
        try:
            rec = read_record(objects, name)
        except (CorruptionError, ValueError):
            continue
        if rec is not None and rec.expired_ns is None:
            out.append(rec.name)
    return sorted(out)


def unregistered_message(root: str, name: str) -> str:
    """What ``quiver status`` and ``quiver fsck`` say about such a subscriber."""
    return (
        f"subscriber {name} has a subscription record but is not registered in the ack log "
        "(a damaged or cut ack log?): retention keeps every segment it may not have read; "
        f"`quiver subscribers {root} add {name}` registers it again (from the earliest "
        f"retained segment), `quiver subscribers {root} remove {name}` releases its data"
    )
