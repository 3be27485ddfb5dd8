"""Every name a store gives its files and objects, built in one place. No I/O here.

Each function returns one key of ARCHITECTURE.md §1 (the store layout), §13.1 (the
subscriber directory) or §1.2 (the object layout): relative, ``/``-separated, built
from the names below and nothing else. An object root uses a key as is; a POSIX root
joins it under its directory (``os.path.join(root, key)``: the same bytes on POSIX).
Three bases exist, each named in the docstrings:

- the store's root (``STORE``, ``partitions/<pid>/LEASE``, ``subscribers/...``);
- a WAL root (``wal.path``; ``<root>/partitions`` by default, §21): ``<pid>/wal/``,
  ``<pid>/STATE``, ``<pid>/HEARTBEAT``, ``<pid>/LOCK``;
- a segments location (``<root>/segments`` or ``segment.path``, §5): ``<pid>/<seq>.arrow``.

The parsers that read a name back from a listing sit beside their builder. The
arguments are not validated here: the caller validates a name that comes from outside
(``config.validate_name``) before it builds a key from it.
tests/engine/test_every_key_is_built_by_the_layout_module.py checks each key against
the literal layout and fails on a key built anywhere else.
"""

from __future__ import annotations

import re

# -- the names (ARCHITECTURE.md §1) ----------------------------------------------
_STORE = "STORE"
_POLICY = "POLICY"
_POLICY_COPY = "POLICY.copy"
_OBJECTS_LOCK = ".objects.lock"
_PARTITIONS = "partitions"
_SEGMENTS = "segments"
_SUBSCRIBERS = "subscribers"
_RECORDS = "records"
_READERS = "readers"
_COMMITS = "commits"
_METRICS = "metrics"
_WAL = "wal"
_TXNS = "txns"
_QUARANTINE = "quarantine"
_CLOCK = "CLOCK"
_TMP = ".tmp"
_ARROW = ".arrow"
_META = ".meta"
_REASON = ".reason"
_WAL_SUFFIX = ".wal"
_TXN = ".txn"
_COMMIT = ".commit"
_SUB = ".sub"
_ACK = ".ack"
_LOST = ".lost.jsonl"
_PROM = ".prom"
_ACK_LOG_PREFIX = "ack-"
_ACK_LOG_SUFFIX = ".log"
_POOL_SLOT_PREFIX = "w-"
_WRITER_METRICS_PREFIX = "writer-"
_CONSUMER_METRICS_PREFIX = "consumer-"


def _seq(n: int) -> str:
    return f"{n:020d}"


def _parse20(name: str, prefix: str, suffix: str) -> int | None:
    """The number in ``<prefix><20 digits><suffix>``, None for any other name."""
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    stem = name[len(prefix) : len(name) - len(suffix)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _parse_seq(name: str, suffix: str) -> int | None:
    """The sequence number in ``name`` if it is ``<20 digits><suffix>``, else None."""
    return _parse20(name, "", suffix)


# -- temporary files (§9.1, §5.3) ------------------------------------------------
def tmp(name: str) -> str:
    """``<name>.tmp``: the temporary a file is written to before its rename (§9.1)."""
    return name + _TMP


def unique_tmp(name: str, tag: str) -> str:
    """``<name>.<tag>.tmp``: a temporary of its own for one writer among several
    (``<name>.<pid>-<thread>-<hex>.tmp``, §7.1)."""
    return f"{name}.{tag}{_TMP}"


def is_tmp(name: str) -> bool:
    """Whether ``name`` is a temporary (``*.tmp``, §11.2, §9.3): never data."""
    return name.endswith(_TMP)


# -- the store's root: control files (§1, §7.1, §7.2, §2.3) -------------------------
def store_descriptor() -> str:
    """``STORE``: the store descriptor (§1, §7.1, §2.3)."""
    return _STORE


def policy() -> str:
    """``POLICY``: the store's retention and subscriber policy (§1, §7.2, §2.3)."""
    return _POLICY


def policy_copy() -> str:
    """``POLICY.copy``: the last policy written, what repair restores (§1, §7.2, §2.3)."""
    return _POLICY_COPY


def objects_lock() -> str:
    """``.objects.lock``: the name of the flock a POSIX root keeps in each directory
    whose objects it replaces conditionally (§1, §2.2, §2.3)."""
    return _OBJECTS_LOCK


_WRITTEN_BEFORE_STORE = re.compile(
    r"(?:POLICY|POLICY\.copy|\.objects\.lock"
    r"|(?:STORE|POLICY|POLICY\.copy)(?:\.[0-9]+-[0-9]+-[0-9a-f]+)?\.tmp)"
)


def written_before_store(name: str) -> bool:
    """Whether ``name``, an entry of a root's directory, is one a creation writes before
    its STORE (§7.1: POLICY, POLICY.copy, their temporary files ``<name>.tmp`` and
    ``<name>.<pid>-<thread>-<hex>.tmp``, the directory's lock)."""
    return _WRITTEN_BEFORE_STORE.fullmatch(name) is not None


# -- the store's root: partitions/ (§1, §8.2, §11.3, §10.2) -------------------------
def partitions_dir() -> str:
    """``partitions``: the default WAL root under the store's root (§1, §21)."""
    return _PARTITIONS


def partitions_prefix() -> str:
    """``partitions/``: the prefix every partition's objects share (§2)."""
    return f"{_PARTITIONS}/"


def partition_of(key: str) -> str | None:
    """The ``<pid>`` of a key ``partitions/<pid>/<...>`` (§2), None for any other key."""
    parts = key.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == _PARTITIONS else None


def writer_lease(partition: str) -> str:
    """``partitions/<pid>/LEASE``: the partition's writer lease on an object root (§8.2)."""
    return f"{_PARTITIONS}/{partition}/LEASE"


def manifest(partition: str) -> str:
    """``partitions/<pid>/MANIFEST``: the partition's publication record (§11.1, §11.3)."""
    return f"{_PARTITIONS}/{partition}/MANIFEST"


def gone(partition: str) -> str:
    """``partitions/<pid>/GONE``: on an object root, a second copy of what the
    partition's MANIFEST knows that no listing can tell (the seqs gone, its high, the
    transactions sealed), kept by retention (§11.3)."""
    return f"{_PARTITIONS}/{partition}/GONE"


def slots_clock() -> str:
    """``partitions/CLOCK``: on an object root, the empty probe a slot claim reads the
    storage's clock by (only its modification time is read, §8.2): a key of its own,
    beside the partitions' directories and none of them."""
    return f"{_PARTITIONS}/{_CLOCK}"


def staged_prefix(partition: str) -> str:
    """``partitions/<pid>/txns/``: where a partition's staged transactions live (§10.2)."""
    return f"{_PARTITIONS}/{partition}/{_TXNS}/"


def staged_txn(partition: str, txn_id: int) -> str:
    """``partitions/<pid>/txns/<txn_id:020d>.txn``: a staged transaction (§10.2)."""
    return f"{staged_prefix(partition)}{_seq(txn_id)}{_TXN}"


def parse_staged_txn_name(name: str) -> int | None:
    """The transaction id a staged object's name (``<txn_id:020d>.txn``) gives, None
    for any other name (any number of digits is read, as always)."""
    stem = name[: -len(_TXN)] if name.endswith(_TXN) else ""
    return int(stem) if stem.isdigit() else None


def is_staged_key(key: str) -> bool:
    """Whether a key listed under ``partitions/`` is a staged transaction's (§10.2)."""
    return key.split("/")[2:3] == [_TXNS] and key.endswith(_TXN)


def staged_txn_stem(name: str) -> str:
    """A staged object's name without its ``.txn`` (the digits of its id, §10.2)."""
    return name.removesuffix(_TXN)


def parse_staged_key(key: str) -> tuple[str, str] | None:
    """``(pid, name)`` of a key ``partitions/<pid>/txns/<name>``, None for any other key."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != _PARTITIONS or parts[2] != _TXNS:
        return None
    return parts[1], parts[3]


def pool_slot(k: int) -> str:
    """``w-<k>``: slot ``k`` of an object root's shared pool, a partition name (§8.2)."""
    return f"{_POOL_SLOT_PREFIX}{k}"


def host_slot(host: str, k: int) -> str:
    """``<host>-<k>``: slot ``k`` of a host on a POSIX root, a partition name (§10, §8.2)."""
    return f"{host}-{k}"


def machine_wal_root(root_digest: str) -> str:
    """``quiver-spark/wal/<digest>``: under ``$XDG_CACHE_HOME`` (``~/.cache``), where
    this machine keeps the WALs of an object root by default (§2)."""
    return f"quiver-spark/{_WAL}/{root_digest}"


# -- a WAL root: <wal_root>/<pid>/ (§1, §4.1, §6.1, §6.2, §21) ------------------------
def wal_dir_name() -> str:
    """``wal``: the WAL files' directory, inside a partition's ``<wal_root>/<pid>/`` (§1)."""
    return _WAL


def state_file_name() -> str:
    """``STATE``: the partition's state, inside its ``<wal_root>/<pid>/`` (§1, §6.1)."""
    return "STATE"


def heartbeat_file_name() -> str:
    """``HEARTBEAT``: the writer's advisory heartbeat, inside ``<wal_root>/<pid>/`` (§6.2)."""
    return "HEARTBEAT"


def lock_file_name() -> str:
    """``LOCK``: the writer's flock target, inside ``<wal_root>/<pid>/`` (§1)."""
    return "LOCK"


def wal_dir(partition: str) -> str:
    """``<pid>/wal``: the partition's WAL files, relative to its WAL root (§1)."""
    return f"{partition}/{wal_dir_name()}"


def wal_file(first_record_seq: int) -> str:
    """``<first_record_seq:020d>.wal``: a WAL file's name in ``wal/`` (§1, §4.1)."""
    return _seq(first_record_seq) + _WAL_SUFFIX


def parse_wal_file(name: str) -> int | None:
    """The first record seq of a WAL file's name, None for any other name."""
    return _parse_seq(name, _WAL_SUFFIX)


def partition_state(partition: str) -> str:
    """``<pid>/STATE``: the partition's state, relative to its WAL root (§1, §6.1)."""
    return f"{partition}/{state_file_name()}"


def partition_heartbeat(partition: str) -> str:
    """``<pid>/HEARTBEAT``: the writer's advisory heartbeat, relative to its WAL root (§6.2)."""
    return f"{partition}/{heartbeat_file_name()}"


def partition_lock(partition: str) -> str:
    """``<pid>/LOCK``: the writer's flock target, relative to its WAL root (§1)."""
    return f"{partition}/{lock_file_name()}"


# -- a segments location: <location>/<pid>/ (§1, §5, §5.4, §11.3) --------------------
def segments_dir() -> str:
    """``segments``: the default segments location under the store's root (§1, §2)."""
    return _SEGMENTS


def segment_data(partition: str, seq: int) -> str:
    """``<pid>/<seq:020d>.arrow``: a finalized segment in its location (§1, §5)."""
    return f"{partition}/{_seq(seq)}{_ARROW}"


def segment_meta(partition: str, seq: int) -> str:
    """``<pid>/<seq:020d>.meta``: a segment's metadata in its location (§1, §6)."""
    return f"{partition}/{_seq(seq)}{_META}"


def parse_segment_data(name: str) -> int | None:
    """The seq of a ``<seq:020d>.arrow`` name, None for any other name."""
    return _parse_seq(name, _ARROW)


def parse_segment_meta(name: str) -> int | None:
    """The seq of a ``<seq:020d>.meta`` name, None for any other name."""
    return _parse_seq(name, _META)


def quarantine_dir(partition: str) -> str:
    """``<pid>/quarantine``: segments moved aside, each with a reason file (§5.4)."""
    return f"{partition}/{_QUARANTINE}"


def quarantine_stem(seq: int, repeat_ns: int | None = None) -> str:
    """``<seq:020d>``, or ``<seq:020d>.<ns>`` for a repeated quarantine of the same seq;
    a quarantined file's name is the stem plus its suffix (§5.4)."""
    stem = _seq(seq)
    return stem if repeat_ns is None else f"{stem}.{repeat_ns}"


def quarantined_data(stem: str) -> str:
    """``<stem>.arrow``: a quarantined segment's data (§5.4)."""
    return stem + _ARROW


def quarantined_meta(stem: str) -> str:
    """``<stem>.meta``: a quarantined segment's metadata (§5.4)."""
    return stem + _META


def quarantine_reason(stem: str) -> str:
    """``<stem>.reason``: why a segment was quarantined, UTF-8 text (§5.4)."""
    return stem + _REASON


def is_quarantine_reason(name: str) -> bool:
    """Whether ``name`` is a quarantine ``.reason`` file (§5.4)."""
    return name.endswith(_REASON)


def parse_segment_file_seq(name: str) -> int | None:
    """The seq of any segment file name: ``.arrow``, ``.meta`` or ``.reason``, with or
    without a trailing ``.tmp``; None for any other name."""
    stem = name[: -len(_TMP)] if name.endswith(_TMP) else name
    for suffix in (_ARROW, _META, _REASON):
        seq = _parse_seq(stem, suffix)
        if seq is not None:
            return seq
    return None


def parse_quarantined_seq(name: str) -> int | None:
    """The seq of a file in ``quarantine/``: ``<seq>.<suffix>`` or ``<seq>.<ns>.<suffix>``."""
    return parse_segment_file_seq(name.split(".", 1)[0] + "." + name.rsplit(".", 1)[-1])


def quarantine_mark() -> str:
    """``QUARANTINE``: at a segments location's root, replaced after every quarantine (§5.4)."""
    return "QUARANTINE"


def quarantine_mark_tmp(token_hex: str) -> str:
    """``QUARANTINE.<token hex>.tmp``: a quarantine mark's own temporary (§5.4)."""
    return f"{quarantine_mark()}.{token_hex}{_TMP}"


_HINTS = "~hints"
_HINT = ".hint"


def hints_dir() -> str:
    """``~hints``: at a segments location's root, the publication hints (§12); ``~`` is
    outside the §1 name rules, so no reader takes the directory for a partition."""
    return _HINTS


def hint_name(partition: str, seq: int) -> str:
    """``<pid>.<seq:020d>.hint`` in :func:`hints_dir`: created before the publication of
    segment ``seq`` of ``partition`` (§12)."""
    return f"{partition}.{_seq(seq)}{_HINT}"


def parse_hint_name(name: str) -> tuple[str, int] | None:
    """``(pid, seq)`` of a hint's name, None for any other name (the pid is checked by
    the caller against the §1 rules)."""
    stem = name[: -len(_HINT)] if name.endswith(_HINT) else ""
    pid, dot, digits = stem.rpartition(".")
    if not dot or not pid or len(digits) != 20 or not digits.isdigit():
        return None
    return pid, int(digits)


def quarantine_hint() -> str:
    """``QUARANTINE`` in :func:`hints_dir`: replaced after every quarantine mark (§12)."""
    return quarantine_mark()


def quarantine_hint_tmp(token_hex: str) -> str:
    """``QUARANTINE.<token hex>.tmp`` in :func:`hints_dir`: its own temporary (§12)."""
    return quarantine_mark_tmp(token_hex)


# -- the store's root: subscribers/ (§1, §13.1, §13.8, §13.7) -------------------------
def subscribers_dir() -> str:
    """``subscribers``: the subscriber registry's directory (§1, §13.1)."""
    return _SUBSCRIBERS


def subscribers_prefix() -> str:
    """``subscribers/``: the prefix of every registry object (§13.7)."""
    return f"{_SUBSCRIBERS}/"


def registry_lock() -> str:
    """``subscribers/LOCK``: the POSIX registry's flock target (§13.1)."""
    return f"{_SUBSCRIBERS}/LOCK"


def registry_checkpoint() -> str:
    """``subscribers/CHECKPOINT``: the registry's checkpoint, a file on a POSIX root
    (§13.1, §13.5) and an object on an object root (§13.7)."""
    return f"{_SUBSCRIBERS}/CHECKPOINT"


def ack_log_file(gen: int) -> str:
    """``ack-<gen:020d>.log``: a POSIX ack-log file's name in ``subscribers/`` (§13.1)."""
    return f"{_ACK_LOG_PREFIX}{_seq(gen)}{_ACK_LOG_SUFFIX}"


def parse_ack_log_file(name: str) -> int | None:
    """The generation of an ack-log file's name, None for any other name."""
    return _parse20(name, _ACK_LOG_PREFIX, _ACK_LOG_SUFFIX)


def ack_deltas_prefix() -> str:
    """``subscribers/log/``: the prefix of an object root's ack-log deltas (§13.7)."""
    return f"{_SUBSCRIBERS}/log/"


def ack_delta(n: int) -> str:
    """``subscribers/log/<n:020d>.ack``: ack-log delta ``n`` on an object root (§13.7)."""
    return f"{ack_deltas_prefix()}{_seq(n)}{_ACK}"


def parse_ack_delta(key: str) -> int | None:
    """The number of an ack-log delta's key, None for any other key."""
    return _parse20(key, ack_deltas_prefix(), _ACK)


def records_dir() -> str:
    """``subscribers/records``: the subscriber records' directory (§1, §13.8)."""
    return f"{_SUBSCRIBERS}/{_RECORDS}"


def records_prefix() -> str:
    """``subscribers/records/``: the prefix of every subscriber record (§13.8, §2.3)."""
    return f"{records_dir()}/"


def subscriber_record(name: str) -> str:
    """``subscribers/records/<name>.sub``: a subscriber's record (§13.8, §2.3)."""
    return f"{records_prefix()}{name}{_SUB}"


def parse_subscriber_record(key: str) -> str | None:
    """The subscriber a record's key names (``subscribers/records/<name>.sub``), None
    for any other key (also one in a directory below)."""
    if not key.startswith(records_prefix()):
        return None
    entry = key[len(records_prefix()) :]
    if "/" in entry or not entry.endswith(_SUB):
        return None
    return entry[: -len(_SUB)]


def is_subscriber_record(key: str) -> bool:
    """Whether ``key`` names a subscriber record (``.sub``, §13.8)."""
    return key.endswith(_SUB)


def records_clock() -> str:
    """``subscribers/records/CLOCK``: the empty probe whose modification time is the
    storage's "now" for expiry (§13.8); never a record (no ``.sub``)."""
    return f"{records_prefix()}{_CLOCK}"


# -- the store's root: commits/ (§1, §10, §2.3) --------------------------------------
def commits_dir() -> str:
    """``commits``: the transaction commit records' directory (§1, §10)."""
    return _COMMITS


def commits_prefix() -> str:
    """``commits/``: the prefix of every commit record (§2.3)."""
    return f"{_COMMITS}/"


def commit_app_prefix(app: str) -> str:
    """``commits/<app>/``: the commit records of one transaction app id (§10)."""
    return f"{_COMMITS}/{app}/"


def commit_record(app: str, version: int) -> str:
    """``commits/<app>/<version:020d>.commit``: a transaction's commit record (§10, §2.3)."""
    return f"{commit_app_prefix(app)}{_seq(version)}{_COMMIT}"


def parse_commit_version(name: str) -> int | None:
    """The version of a commit record's name (``<version:020d>.commit``), else None."""
    return _parse_seq(name, _COMMIT)


def is_commit_record(key: str) -> bool:
    """Whether ``key`` names a commit record (§10)."""
    return key.endswith(_COMMIT)


# -- the store's root: readers/ (§1, §18, §8.2) -------------------------------------
def readers_dir() -> str:
    """``readers``: consumers' advisory files and leases (§1, §18)."""
    return _READERS


def readers_prefix() -> str:
    """``readers/``: the prefix of every consumer's object (§2)."""
    return f"{_READERS}/"


def live_lock(subscriber: str) -> str:
    """``readers/<subscriber>.lock``: the flock of a subscriber's live consumer (§1, §18)."""
    return f"{_READERS}/{subscriber}.lock"


def is_live_lock(key: str) -> bool:
    """Whether ``key`` is a live consumer's lock file (§18)."""
    return key.endswith(".lock")


def live_lease(subscriber: str) -> str:
    """``readers/<subscriber>.lease``: the live-consumer lease on an object root (§8.2)."""
    return f"{_READERS}/{subscriber}.lease"


def is_live_lease(key: str) -> bool:
    """Whether ``key`` is a live consumer's lease (§8.2)."""
    return key.endswith(".lease")


def lost_log(subscriber: str) -> str:
    """``readers/<subscriber>.lost.jsonl``: segments a consumer skipped or failed on (§18)."""
    return f"{_READERS}/{subscriber}{_LOST}"


def is_lost_log(key: str) -> bool:
    """Whether ``key`` is a consumer's lost-segment log (§18)."""
    return key.endswith(_LOST)


# -- the store's root: metrics/ (§1, §2.3) ------------------------------------------
def metrics_dir() -> str:
    """``metrics``: the Prometheus text files of writers and consumers (§1)."""
    return _METRICS


def metrics_prefix() -> str:
    """``metrics/``: the prefix of every metrics object (§2.3)."""
    return f"{_METRICS}/"


def metrics_file(instance: str) -> str:
    """``metrics/<instance>.prom``: one process's exposition (§1, §2.3)."""
    return f"{_METRICS}/{instance}{_PROM}"


def is_metrics_file(key: str) -> bool:
    """Whether ``key`` is a Prometheus text file (``.prom``)."""
    return key.endswith(_PROM)


def writer_metrics_instance(partition: str) -> str:
    """``writer-<pid>``: the metrics instance of a partition's writer (§1)."""
    return f"{_WRITER_METRICS_PREFIX}{partition}"


def consumer_metrics_instance(subscriber: str) -> str:
    """``consumer-<subscriber>``: the metrics instance of a subscriber's consumer (§1)."""
    return f"{_CONSUMER_METRICS_PREFIX}{subscriber}"


def parse_writer_metrics_file(name: str) -> str | None:
    """The partition of a writer's metrics file name (``writer-<pid>.prom``), else None."""
    if not (name.startswith(_WRITER_METRICS_PREFIX) and name.endswith(_PROM)):
        return None
    return name[len(_WRITER_METRICS_PREFIX) : -len(_PROM)]
