"""The store's own policy: retention and subscriber expiry, recorded in ``<root>/POLICY``.

A store keeps one policy whoever writes, reads or maintains it (ARCHITECTURE.md §7.2).
It is recorded when the store is created (from its first opener's options, the YAML
config or the CLI) and changes only explicitly (:func:`replace_policy`, ``quiver
config PATH set``): a process whose explicit option contradicts it fails at start,
naming the option, both values and how to change it (:func:`reconcile`).

The object ``POLICY`` (a §6 frame, on any root: ARCHITECTURE.md §2.3) is created if
absent when recorded and then only replaced whole, conditional on the version read
(``If-Match``), so of two changes made from one reading exactly one is written; a
change may also name the ``generation`` it read and is then refused if another change
came first.

Damage never stops the store: while POLICY cannot be read (a failed checksum, or
missing while its copy ``POLICY.copy`` exists) :func:`read_policy` returns
:data:`CONSERVATIVE` with ``damaged`` set: no time window, no size cap, no
drop_oldest, no expiry, so nothing is deleted that every subscriber has not
acknowledged. Every change writes POLICY and then the same bytes to ``POLICY.copy``;
:func:`repair_policy` (``quiver config PATH repair``) restores POLICY from that copy
or from explicit values.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import format as fmt
from . import layout
from . import option_table as o
from .config import RetentionConfig, SizeCapPolicy, StoreConfig
from .control import cas
from .errors import (
    ConfigError,
    CorruptionError,
    LostRaceError,
    ObjectExists,
    PolicyConflictError,
    PolicyRepairError,
    PreconditionFailed,
)
from .objects import ObjectStore, Stored
from .objects.writes import retry_conflicts

log = logging.getLogger(__name__)

POLICY_FILE = layout.policy()
POLICY_COPY_FILE = layout.policy_copy()
"""The last policy written, written right after POLICY itself: what repair restores."""

# option name -> RetentionConfig field, for the options a store's policy holds
RETENTION_FIELDS: dict[str, str] = {
    o.RETENTION_SIZE_CAP: "size_cap_bytes",
    o.RETENTION_SIZE_CAP_POLICY: "size_cap_policy",
    o.RETENTION_MAX_AGE: "max_age_hours",
    o.RETENTION_STEADY_STATE_HEADROOM: "steady_state_headroom_bytes",
}
EXPIRE_AFTER = o.SUBSCRIBER_EXPIRE_AFTER
POLICY_OPTIONS = (*RETENTION_FIELDS, EXPIRE_AFTER)


@dataclass(frozen=True)
class StorePolicy:
    """What a store keeps and for how long, shared by every process that opens it."""

    generation: int = 0
    """0 until recorded; then 1, and +1 per change."""
    size_cap_bytes: int | None = o.RETENTION_SIZE_CAP_DEFAULT
    size_cap_policy: SizeCapPolicy = o.RETENTION_SIZE_CAP_POLICY_DEFAULT
    max_age_hours: float | None = o.RETENTION_MAX_AGE_DEFAULT
    steady_state_headroom_bytes: int = o.RETENTION_STEADY_STATE_HEADROOM_DEFAULT
    expire_after_s: float | None = o.SUBSCRIBER_EXPIRE_AFTER_DEFAULT
    """Deregister a subscriber that has not acknowledged for this long (None: never)."""
    updated_ns: int = 0
    damaged: str | None = dataclasses.field(default=None, compare=False)
    """Why POLICY could not be read (reason, file and offset); the fields are then the
    most conservative reading (:data:`CONSERVATIVE`). Never written."""

    def retention(self, base: RetentionConfig) -> RetentionConfig:
        """``base`` (a process's config) with the policy's retention fields."""
        return dataclasses.replace(base, **{f: getattr(self, f) for f in RETENTION_FIELDS.values()})

    def value(self, option: str) -> Any:
        if option == EXPIRE_AFTER:
            return self.expire_after_s
        return getattr(self, RETENTION_FIELDS[option])

    def shown(self, option: str) -> str:
        """The value of ``option`` as a person writes it."""
        return show(option, self.value(option))

    def to_body(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "updated_ns": self.updated_ns,
            "retention": {
                "size_cap": self.size_cap_bytes,
                "size_cap_policy": self.size_cap_policy.value,
                "max_age_hours": self.max_age_hours,
                "steady_state_headroom": self.steady_state_headroom_bytes,
            },
            "subscriber": {"expire_after_s": self.expire_after_s},
        }

    @classmethod
    def from_body(cls, path: str, body: Mapping[str, Any]) -> StorePolicy:
        try:
            ret = body.get("retention") or {}
            sub = body.get("subscriber") or {}
            gen = body["generation"]
            if not isinstance(gen, int) or isinstance(gen, bool) or gen < 1:
                raise ValueError(f"generation {gen!r}")
            return cls(
                generation=gen,
                size_cap_bytes=_opt_int(ret.get("size_cap")),
                size_cap_policy=SizeCapPolicy(ret.get("size_cap_policy", "backpressure")),
                max_age_hours=_opt_float(ret.get("max_age_hours")),
                steady_state_headroom_bytes=int(ret.get("steady_state_headroom", 0)),
                expire_after_s=_opt_float(sub.get("expire_after_s")),
                updated_ns=int(body.get("updated_ns", 0)),
            )
        except (KeyError, ValueError, TypeError) as e:
            raise CorruptionError(path, fmt.FRAME_SIZE, f"invalid policy body: {e}") from e


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def show(option: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, SizeCapPolicy):
        return value.value
    if option in (o.RETENTION_SIZE_CAP, o.RETENTION_STEADY_STATE_HEADROOM):
        return _size(int(value))
    if option == EXPIRE_AFTER:
        return _duration(float(value))
    if option == o.RETENTION_MAX_AGE:
        return _duration(float(value) * 3600)
    return str(value)


def _size(n: int) -> str:
    for unit, mult in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}B"


def _duration(s: float) -> str:
    for unit, mult in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= mult and s % mult == 0:
            return f"{int(s // mult)}{unit}"
    return f"{s:g}s"


CONSERVATIVE = StorePolicy(
    size_cap_bytes=None,
    size_cap_policy=SizeCapPolicy.BACKPRESSURE,
    max_age_hours=None,
    steady_state_headroom_bytes=0,
    expire_after_s=None,
)
"""What a store applies while its POLICY cannot be read: no time window, no size cap
(so no drop_oldest and no throttling on a cap nobody can read), no expiry. Only
segments every subscriber acknowledged are reclaimed."""


def policy_path(root: str) -> str:
    return os.path.join(root, POLICY_FILE)


def copy_path(root: str) -> str:
    return os.path.join(root, POLICY_COPY_FILE)


def repair_hint(root: str) -> str:
    return f"quiver config {root} repair --from-last-good (or repair KEY=VALUE ...)"


_warned: set[str] = set()


def _decode(path: str, raw: bytes) -> StorePolicy:
    return StorePolicy.from_body(path, fmt.decode_frame(path, fmt.MAGIC_POLICY, raw))


def _read(objects: ObjectStore) -> tuple[StorePolicy | None, Stored | None]:
    """The recorded policy and the object it was read from (its version is what a
    change is conditional on); (None, None) when none is recorded. CorruptionError
    when POLICY fails verification, or is missing while its copy exists."""
    got = objects.get(POLICY_FILE)
    if got is None:
        if objects.head(POLICY_COPY_FILE) is not None:
            raise CorruptionError(
                objects.display(POLICY_FILE),
                0,
                f"missing, though its copy {POLICY_COPY_FILE} exists",
            )
        return None, None
    return _decode(objects.display(POLICY_FILE), got.data), got


def read_recorded(objects: ObjectStore) -> StorePolicy | None:
    """The recorded policy, None when none is recorded; CorruptionError when POLICY
    fails verification, or is missing while its copy exists (it was recorded)."""
    return _read(objects)[0]


def read_policy(objects: ObjectStore) -> StorePolicy | None:
    """The recorded policy, or None when the store has none recorded yet.

    A POLICY that cannot be read gives :data:`CONSERVATIVE` with ``damaged`` saying
    why (logged once per process and reason): damage to it never stops a writer, a
    consumer or a command. An error reading it (EIO...) gives the same for this read;
    the next read (every retention pass) tries again.
    """
    try:
        return read_recorded(objects)
    except (CorruptionError, OSError) as e:  # EIO too: retried by the next read
        why = (
            str(e)
            if isinstance(e, CorruptionError)
            else f"cannot read {objects.display(POLICY_FILE)}: {e}"
        )
        if why not in _warned:
            _warned.add(why)
            log.warning("quiver.policy.damaged %s", damage_warning(objects.url, why))
        return dataclasses.replace(CONSERVATIVE, damaged=why)


def damage_warning(root: str, damaged: str) -> str:
    """The one line every command prints while POLICY cannot be read."""
    return (
        f"POLICY cannot be read: {damaged}; the most conservative policy applies (no time "
        f"window, no size cap, no expiry) until it is repaired with: {repair_hint(root)}"
    )


def policy_of(config: StoreConfig) -> StorePolicy:
    """The policy a new store gets from its creator's config."""
    r = config.retention
    return StorePolicy(
        size_cap_bytes=r.size_cap_bytes,
        size_cap_policy=r.size_cap_policy,
        max_age_hours=r.max_age_hours,
        steady_state_headroom_bytes=r.steady_state_headroom_bytes,
        expire_after_s=config.subscriber_expire_after_s,
    )


def _write(objects: ObjectStore, policy: StorePolicy, read: Stored | None) -> None:
    """POLICY, conditional on the object ``read`` (None: created if absent), then the
    same bytes to its copy. VersionMismatch / ObjectExists when another change came
    first (nothing written). The copy is what repair restores; a failure to write it
    leaves the change made (logged, and named by quiver fsck)."""
    data = _encode(policy)
    if read is None:
        retry_conflicts(lambda: objects.create(POLICY_FILE, data))
    else:
        retry_conflicts(lambda: objects.replace(POLICY_FILE, data, version=read.version))
    _copy_best_effort(objects, data, policy.generation)


def _encode(policy: StorePolicy) -> bytes:
    return fmt.encode_frame(fmt.MAGIC_POLICY, policy.to_body())


def _copy_best_effort(objects: ObjectStore, data: bytes, generation: int | None) -> None:
    """:func:`_write_copy` after POLICY was written: a failure leaves the change made
    (logged, and named by quiver fsck)."""
    try:
        _write_copy(objects, data, generation)
    except OSError as e:
        log.warning("quiver.policy.copy_unwritten %s: %s", objects.display(POLICY_COPY_FILE), e)


def _write_copy(objects: ObjectStore, data: bytes, generation: int | None) -> None:
    """Make POLICY.copy hold ``data`` unless it already holds a later generation
    (``generation`` None: whatever it holds). Conditional on the version read, so
    two changers racing never leave it behind the later one's POLICY."""

    def change(got: bytes | None) -> bytes | None:
        if got is not None:
            if got == data:
                return None
            if generation is not None:
                try:
                    if _decode(objects.display(POLICY_COPY_FILE), got).generation > generation:
                        return None
                except CorruptionError:
                    pass  # a damaged copy is rewritten
        return data

    cas.update(
        objects,
        POLICY_COPY_FILE,
        change,
        decode=lambda got: got.data,
        encode=lambda data: data,
        give_up=lambda _: OSError(
            f"{objects.display(POLICY_COPY_FILE)} kept changing under the write"
        ),
    )


def ensure_policy(objects: ObjectStore, config: StoreConfig) -> StorePolicy:
    """The store's policy, recording ``config``'s as generation 1 if none is recorded
    (a new store, or one created before policies were recorded): created if absent, so
    of two first openers exactly one records it and the other reads that one."""
    current = read_policy(objects)
    if current is not None:
        return current
    first = dataclasses.replace(policy_of(config), generation=1, updated_ns=time.time_ns())
    try:
        _write(objects, first, None)
    except ObjectExists:  # recorded by another opener meanwhile
        return read_policy(objects) or first
    return first


def policy_before_store(objects: ObjectStore, config: StoreConfig) -> StorePolicy:
    """POLICY and POLICY.copy, written by a store's creator before STORE, the object
    that makes the root a store (ARCHITECTURE.md §7.1), so a creation stopped at any
    point leaves no store or a whole one.

    A POLICY already there without a STORE was recorded by a creation that did not
    finish, or by one running now: it is adopted (of two creators one records it and
    the other reads that one), its copy written if missing, and an explicit option of
    ``config`` that contradicts it is refused before STORE exists. A failure to write
    the copy fails the creation here (nothing makes the root a store yet); an error
    reading POLICY too (EIO, nothing answering): a store is never made without one.
    """
    first = dataclasses.replace(policy_of(config), generation=1, updated_ns=time.time_ns())
    data = fmt.encode_frame(fmt.MAGIC_POLICY, first.to_body())
    try:
        current, got = _read(objects)
        if current is None:
            try:
                retry_conflicts(lambda: objects.create(POLICY_FILE, data))
            except ObjectExists:  # another creator recorded it meanwhile: that one
                current, got = _read(objects)
            else:
                _write_copy(objects, data, first.generation)
                return first
    except CorruptionError:  # damaged leftovers: adopted as any store's damaged POLICY
        damaged = read_policy(objects)
        assert damaged is not None
        return damaged
    if current is None or got is None:
        shown = objects.display(POLICY_FILE)
        raise LostRaceError(shown, f"{shown} was removed while the store was created")
    reconcile(objects.url, current, config, unfinished=True)
    _write_copy(objects, got.data, current.generation)
    return current


def reconcile(
    root: str, policy: StorePolicy, config: StoreConfig, *, unfinished: bool = False
) -> None:
    """Refuse an explicit option of ``config`` that contradicts ``policy``.

    An option counts as explicit when it was given (``config.explicit``) or, for a
    config built in code, when its value differs from the default. ``unfinished``:
    ``policy`` was recorded by a creation of the store that has not written its STORE.
    """
    if policy.damaged is not None:
        return  # nothing to compare with: the conservative reading applies to everyone
    mine = policy_of(config)
    default = policy_of(StoreConfig())
    for option in POLICY_OPTIONS:
        given = mine.value(option)
        explicit = option in config.explicit or given != default.value(option)
        if explicit and given != policy.value(option):
            recorded = f"{option}={policy.shown(option)} (generation {policy.generation})"
            raise PolicyConflictError(
                option,
                show(option, given),
                f"the policy recorded by a creation of the store at {root} that has not "
                f"finished (there is no STORE yet), {recorded}; omit the option to create "
                f"the store with it, then change it with: quiver config {root} set "
                f"{option}=VALUE"
                if unfinished
                else f"the store's recorded policy, {recorded}; omit the option to use it, "
                f"or change the store's policy with: quiver config {root} set {option}=VALUE",
            )


def replace_policy(
    objects: ObjectStore,
    changes: Mapping[str, Any],
    *,
    expected_generation: int | None = None,
) -> StorePolicy:
    """Change the recorded policy; ``changes`` maps option names to parsed values.

    The write is conditional on the version read. With ``expected_generation`` the
    change is refused if the policy moved on since the caller read it, or if another
    change wins the race to replace it; without, a change that loses the race is
    applied again on top of the winner's. Returns the new policy.
    """
    _check_options(changes)
    root = objects.url

    def read() -> cas.Current[StorePolicy]:
        # a store from before policies were recorded starts from the defaults
        try:
            recorded, got = _read(objects)
        except CorruptionError as e:
            raise CorruptionError(
                e.path,
                e.offset,
                f"cannot change a damaged policy (repair it with: {repair_hint(root)}): {e.reason}",
            ) from e
        return cas.Current(recorded or StorePolicy(), got.version if got is not None else None)

    def change(current: StorePolicy | None) -> StorePolicy:
        assert current is not None
        if expected_generation is not None and current.generation != expected_generation:
            raise PolicyConflictError(
                "generation",
                expected_generation,
                f"the store's policy, now at generation {current.generation}: it changed "
                "since it was read; read it again and retry",
            )
        return _changed(current, current.generation + 1, changes)

    written = cas.update(
        objects,
        POLICY_FILE,
        change,
        read=read,
        encode=_encode,
        give_up=lambda attempts: PolicyConflictError(
            "policy",
            ", ".join(sorted(changes)),
            f"a policy that stops changing under the write ({attempts} attempts); retry",
        ),
    )
    assert written is not None
    _copy_best_effort(objects, _encode(written.value), written.value.generation)
    return written.value


def _check_options(changes: Mapping[str, Any]) -> None:
    unknown = sorted(set(changes) - set(POLICY_OPTIONS))
    if unknown:
        raise ConfigError(unknown[0], changes[unknown[0]], "one of " + ", ".join(POLICY_OPTIONS))


def _changed(base: StorePolicy, generation: int, changes: Mapping[str, Any]) -> StorePolicy:
    """``base`` with ``changes`` as ``generation``, validated as a config would be (a
    size cap of zero, a negative headroom, ...)."""
    fields: dict[str, Any] = {}
    for option, value in changes.items():
        fields["expire_after_s" if option == EXPIRE_AFTER else RETENTION_FIELDS[option]] = value
    new = dataclasses.replace(base, generation=generation, updated_ns=time.time_ns(), **fields)
    RetentionConfig(**{f: getattr(new, f) for f in RETENTION_FIELDS.values()})
    return new


def repair_policy(
    objects: ObjectStore, changes: Mapping[str, Any], *, from_last_good: bool = False
) -> tuple[StorePolicy, str]:
    """Rewrite a POLICY that cannot be read, or its copy (``quiver config PATH repair``).

    A damaged POLICY is rewritten from its copy (``from_last_good``: the last policy
    written) with ``changes`` on top, or from the defaults with ``changes``; the result
    gets the copy's generation + 1 (or 1 when the copy is unreadable), and is written
    with its copy. A POLICY that reads fine and whose copy is damaged, missing or
    stale gets its copy rewritten (no ``changes`` then). Returns the policy and the
    object rewritten (as messages show it). Nothing to repair, or ``changes`` for a
    readable POLICY, is a QuiverError naming ``set``; a copy that cannot be read when
    ``from_last_good`` is asked is a CorruptionError naming it. The rewrite is
    conditional on the damaged object read: a concurrent repair or change makes this
    one look again.
    """
    _check_options(changes)
    # a whole repair is tried again (it reads POLICY, its copy, and decides), within
    # the bound of every conditional write (cas.ATTEMPTS)
    for _ in range(cas.ATTEMPTS):
        try:
            return _repair_once(objects, changes, from_last_good)
        except PreconditionFailed:
            continue
    shown = objects.display(POLICY_FILE)
    raise LostRaceError(
        shown, f"{shown} kept changing during the repair; run it again", attempts=cas.ATTEMPTS
    )


def _repair_once(
    objects: ObjectStore, changes: Mapping[str, Any], from_last_good: bool
) -> tuple[StorePolicy, str]:
    root = objects.url
    shown, shown_copy = objects.display(POLICY_FILE), objects.display(POLICY_COPY_FILE)
    try:
        current, read = _read(objects)
    except CorruptionError:
        pass
    else:
        if current is not None and read is not None and not changes:
            copied = objects.get(POLICY_COPY_FILE)
            if copied is None or copied.data != read.data:
                _write_copy(objects, read.data, None)
                log.warning("quiver.policy.copy_repaired %s", shown_copy)
                return current, shown_copy
        state = f"generation {current.generation}" if current else "none recorded yet"
        raise PolicyRepairError(
            shown,
            f"{shown} reads fine ({state}) and so does its copy: nothing to "
            f"repair; change the policy with: quiver config {root} set KEY=VALUE ..."
            if current is not None and not changes
            else f"{shown} reads fine ({state}): repair rewrites a damaged "
            f"one only; change it with: quiver config {root} set KEY=VALUE ...",
            damaged=False,
        )
    if not from_last_good and not changes:
        raise PolicyRepairError(
            shown,
            f"{shown} is damaged: repair it with --from-last-good (its copy) "
            "or KEY=VALUE ... (every value, from the defaults)",
            damaged=True,
        )
    damaged = objects.get(POLICY_FILE)  # the version the rewrite is conditional on
    copied = objects.get(POLICY_COPY_FILE)
    last: StorePolicy | None = None
    if copied is None:
        if from_last_good:
            raise CorruptionError(
                shown_copy, 0, f"no last good policy to repair from ({_explicit(root)}): missing"
            )
    else:
        try:
            last = _decode(shown_copy, copied.data)
        except CorruptionError as e:
            if from_last_good:
                raise CorruptionError(
                    e.path,
                    e.offset,
                    f"no last good policy to repair from ({_explicit(root)}): {e.reason}",
                ) from e
    base = last if (from_last_good and last is not None) else StorePolicy()
    new = _changed(base, (last.generation if last else 0) + 1, changes)
    _write(objects, new, damaged)
    _warned.clear()
    log.warning("quiver.policy.repaired %s generation=%d", shown, new.generation)
    return new, shown


def _explicit(root: str) -> str:
    return f"give every value with: quiver config {root} repair KEY=VALUE ..."
