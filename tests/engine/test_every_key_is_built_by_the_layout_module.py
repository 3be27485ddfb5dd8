"""Every key of the store layout (ARCHITECTURE.md §1, §13.1, §2) is built by one
function of ``quiver_spark/layout.py``, and nowhere else.

The table below is the layout as ARCHITECTURE.md writes it: a change to a key is a
change to this table, deliberately (stores written before must still open). The scan
reads every module of the package with ``ast`` and fails, naming ``file:line``, on a
string literal or f-string piece that spells a layout name where a key is built: a
directory of the layout followed by ``/``, a control file after a ``/``, a file
suffix of the layout, or a control file's or directory's name given to a join.
Docstrings and bare string statements are prose, not keys, and are not read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import quiver_spark
from quiver_spark import layout

PKG = Path(quiver_spark.__file__).resolve().parent

# (function, arguments, the key ARCHITECTURE.md gives)
LAYOUT: list[tuple[Callable[..., Any], tuple[Any, ...], Any]] = [
    # §1, §2.3: the store's control files
    (layout.store_descriptor, (), "STORE"),
    (layout.policy, (), "POLICY"),
    (layout.policy_copy, (), "POLICY.copy"),
    (layout.objects_lock, (), ".objects.lock"),
    # §1, §8.2, §11.3, §10.2: partitions/
    (layout.partitions_dir, (), "partitions"),
    (layout.partitions_prefix, (), "partitions/"),
    (layout.partition_of, ("partitions/p-0/MANIFEST",), "p-0"),
    (layout.partition_of, ("partitions/CLOCK",), None),
    (layout.writer_lease, ("p-0",), "partitions/p-0/LEASE"),
    (layout.manifest, ("p-0",), "partitions/p-0/MANIFEST"),
    (layout.gone, ("p-0",), "partitions/p-0/GONE"),
    (layout.slots_clock, (), "partitions/CLOCK"),
    (layout.staged_prefix, ("p-0",), "partitions/p-0/txns/"),
    (layout.staged_txn, ("p-0", 7), "partitions/p-0/txns/00000000000000000007.txn"),
    (layout.parse_staged_txn_name, ("00000000000000000007.txn",), 7),
    (layout.parse_staged_txn_name, ("7.txn",), 7),
    (layout.parse_staged_txn_name, ("00000000000000000007.tmp",), None),
    (layout.parse_staged_key, ("partitions/p-0/txns/x.txn",), ("p-0", "x.txn")),
    (layout.parse_staged_key, ("partitions/p-0/MANIFEST",), None),
    (layout.is_staged_key, ("partitions/p-0/txns/00000000000000000007.txn",), True),
    (layout.is_staged_key, ("partitions/p-0/MANIFEST",), False),
    (layout.staged_txn_stem, ("00000000000000000007.txn",), "00000000000000000007"),
    (layout.pool_slot, (3,), "w-3"),
    (layout.host_slot, ("host.a", 3), "host.a-3"),
    (layout.machine_wal_root, ("0123abcd",), "quiver-spark/wal/0123abcd"),
    # §1, §4.1, §6.1, §6.2: a WAL root (wal.path, default <root>/partitions)
    (layout.wal_dir_name, (), "wal"),
    (layout.state_file_name, (), "STATE"),
    (layout.heartbeat_file_name, (), "HEARTBEAT"),
    (layout.lock_file_name, (), "LOCK"),
    (layout.wal_dir, ("p-0",), "p-0/wal"),
    (layout.wal_file, (5,), "00000000000000000005.wal"),
    (layout.parse_wal_file, ("00000000000000000005.wal",), 5),
    (layout.parse_wal_file, ("00000000000000000005.wal.tmp",), None),
    (layout.partition_state, ("p-0",), "p-0/STATE"),
    (layout.partition_heartbeat, ("p-0",), "p-0/HEARTBEAT"),
    (layout.partition_lock, ("p-0",), "p-0/LOCK"),
    (layout.tmp, ("p-0/STATE",), "p-0/STATE.tmp"),
    (layout.unique_tmp, ("STORE", "12-34-ab"), "STORE.12-34-ab.tmp"),
    (layout.is_tmp, ("00000000000000000005.arrow.tmp",), True),
    # §1, §5, §5.4: a segments location (default <root>/segments)
    (layout.segments_dir, (), "segments"),
    (layout.segment_data, ("p-0", 12), "p-0/00000000000000000012.arrow"),
    (layout.segment_meta, ("p-0", 12), "p-0/00000000000000000012.meta"),
    (layout.parse_segment_data, ("00000000000000000012.arrow",), 12),
    (layout.parse_segment_meta, ("00000000000000000012.meta",), 12),
    (layout.parse_segment_meta, ("00000000000000000012.arrow",), None),
    (layout.parse_segment_file_seq, ("00000000000000000012.meta.tmp",), 12),
    (layout.parse_segment_file_seq, ("00000000000000000012.reason",), 12),
    (layout.parse_segment_file_seq, ("QUARANTINE",), None),
    (layout.quarantine_dir, ("p-0",), "p-0/quarantine"),
    (layout.quarantine_stem, (12,), "00000000000000000012"),
    (layout.quarantine_stem, (12, 99), "00000000000000000012.99"),
    (layout.quarantined_data, ("00000000000000000012",), "00000000000000000012.arrow"),
    (layout.quarantined_meta, ("00000000000000000012",), "00000000000000000012.meta"),
    (layout.quarantine_reason, ("00000000000000000012",), "00000000000000000012.reason"),
    (layout.is_quarantine_reason, ("00000000000000000012.99.reason",), True),
    (layout.parse_quarantined_seq, ("00000000000000000012.99.arrow",), 12),
    (layout.quarantine_mark, (), "QUARANTINE"),
    (layout.quarantine_mark_tmp, ("ab12",), "QUARANTINE.ab12.tmp"),
    # §12: publication hints
    (layout.hints_dir, (), "~hints"),
    (layout.hint_name, ("w-0", 7), "w-0.00000000000000000007.hint"),
    (layout.parse_hint_name, ("w-0.00000000000000000007.hint",), ("w-0", 7)),
    (layout.parse_hint_name, ("a.b.00000000000000000007.hint",), ("a.b", 7)),
    (layout.parse_hint_name, ("w-0.7.hint",), None),
    (layout.parse_hint_name, ("QUARANTINE",), None),
    (layout.quarantine_hint, (), "QUARANTINE"),
    (layout.quarantine_hint_tmp, ("ab12",), "QUARANTINE.ab12.tmp"),
    # §1, §13.1, §13.8, §13.7: subscribers/
    (layout.subscribers_dir, (), "subscribers"),
    (layout.subscribers_prefix, (), "subscribers/"),
    (layout.registry_lock, (), "subscribers/LOCK"),
    (layout.registry_checkpoint, (), "subscribers/CHECKPOINT"),
    (layout.ack_log_file, (2,), "ack-00000000000000000002.log"),
    (layout.parse_ack_log_file, ("ack-00000000000000000002.log",), 2),
    (layout.parse_ack_log_file, ("ack-2.log",), None),
    (layout.ack_deltas_prefix, (), "subscribers/log/"),
    (layout.ack_delta, (4,), "subscribers/log/00000000000000000004.ack"),
    (layout.parse_ack_delta, ("subscribers/log/00000000000000000004.ack",), 4),
    (layout.parse_ack_delta, ("subscribers/log/4.ack",), None),
    (layout.records_dir, (), "subscribers/records"),
    (layout.records_prefix, (), "subscribers/records/"),
    (layout.subscriber_record, ("s1",), "subscribers/records/s1.sub"),
    (layout.parse_subscriber_record, ("subscribers/records/s1.sub",), "s1"),
    (layout.parse_subscriber_record, ("subscribers/records/CLOCK",), None),
    (layout.parse_subscriber_record, ("subscribers/records/a/s1.sub",), None),
    (layout.is_subscriber_record, ("subscribers/records/s1.sub",), True),
    (layout.records_clock, (), "subscribers/records/CLOCK"),
    # §1, §10, §2.3: commits/
    (layout.commits_dir, (), "commits"),
    (layout.commits_prefix, (), "commits/"),
    (layout.commit_app_prefix, ("app",), "commits/app/"),
    (layout.commit_record, ("app", 9), "commits/app/00000000000000000009.commit"),
    (layout.parse_commit_version, ("00000000000000000009.commit",), 9),
    (layout.is_commit_record, ("commits/app/00000000000000000009.commit",), True),
    # §1, §18, §8.2: readers/
    (layout.readers_dir, (), "readers"),
    (layout.readers_prefix, (), "readers/"),
    (layout.live_lock, ("s1",), "readers/s1.lock"),
    (layout.live_lease, ("s1",), "readers/s1.lease"),
    (layout.lost_log, ("s1",), "readers/s1.lost.jsonl"),
    (layout.is_live_lock, ("readers/s1.lock",), True),
    (layout.is_live_lease, ("readers/s1.lease",), True),
    (layout.is_lost_log, ("readers/s1.lost.jsonl",), True),
    # §1, §2.3: metrics/
    (layout.metrics_dir, (), "metrics"),
    (layout.metrics_prefix, (), "metrics/"),
    (layout.metrics_file, ("writer-p-0",), "metrics/writer-p-0.prom"),
    (layout.is_metrics_file, ("metrics/writer-p-0.prom",), True),
    (layout.writer_metrics_instance, ("p-0",), "writer-p-0"),
    (layout.consumer_metrics_instance, ("s1",), "consumer-s1"),
    (layout.parse_writer_metrics_file, ("writer-p-0.prom",), "p-0"),
    (layout.parse_writer_metrics_file, ("consumer-s1.prom",), None),
    # §7.1: what a creation may leave before STORE
    (layout.written_before_store, ("POLICY.copy",), True),
    (layout.written_before_store, ("STORE.12-34-ab.tmp",), True),
    (layout.written_before_store, ("partitions",), False),
]


@pytest.mark.parametrize(
    ("build", "args", "expected"),
    LAYOUT,
    ids=[f"{f.__name__}{args!r}" for f, args, _ in LAYOUT],
)
def test_each_key_is_the_one_the_architecture_gives(
    build: Callable[..., Any], args: tuple[Any, ...], expected: Any
) -> None:
    assert build(*args) == expected


def test_every_public_function_of_the_layout_is_in_the_table() -> None:
    public = {
        name
        for name, value in vars(layout).items()
        if callable(value) and not name.startswith("_") and value.__module__ == layout.__name__
    }
    assert public - {f.__name__ for f, _, _ in LAYOUT} == set()


def test_every_layout_function_names_its_architecture_section() -> None:
    for f, _, _ in LAYOUT:
        assert re.search(r"§\d", f.__doc__ or "") or f.__name__.startswith(("parse_", "is_")), (
            f.__name__
        )


# -- the scan --------------------------------------------------------------------
DIRS = "partitions|segments|subscribers|records|readers|commits|metrics|txns|wal|quarantine|log"
FILES = "STORE|POLICY|LEASE|MANIFEST|GONE|STATE|HEARTBEAT|LOCK|CLOCK|CHECKPOINT|QUARANTINE"
SUFFIXES = (
    r"arrow|meta|reason|wal|txn|commit|sub|ack|lease|lock|prom|tmp|log|copy|lost\.jsonl|"
    r"objects\.lock"
)
KEY_PATTERNS = [
    re.compile(rf"(?:^|/)(?:{DIRS})/"),  # a layout directory followed by "/"
    re.compile(rf"/(?:{FILES})\b"),  # a control file after "/"
    re.compile(rf"^[\w<>{{}}:-]*(?:\.(?:{SUFFIXES}))+$"),  # a name ending in layout suffixes
    re.compile(rf"^(?:\.(?:{SUFFIXES}))+\W"),  # an f-string piece starting with one
    re.compile(r"^(?:ack|writer|consumer|w)-$"),  # a name's prefix
]
FILE_NAMES = re.compile(rf"^(?:{FILES}|POLICY\.copy)$")
"""A control file's name, alone: a key where a key is handed over."""
DIR_NAMES = re.compile(rf"^(?:{DIRS})$")
"""A directory's name, alone: a path part when given to a join."""
JOINS = {"join", "path"}
"""Calls whose string arguments are path parts (``os.path.join``, a backend's ``join``)."""
KEY_CONTEXTS = (ast.Assign, ast.AnnAssign, ast.BinOp, ast.Call, ast.keyword, ast.Return)
"""Where a name alone is a key: assigned, concatenated, passed (``os.path.join(root,
"STORE")``, ``objects.get("POLICY")``) or returned; not a table cell or a dict key."""
EVENT = re.compile(r"^quiver\.[a-z_]+\.")
"""A log event's name (``quiver.wal.open ...``): prose, whatever words it holds."""


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_join(node: ast.AST | None) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in JOINS


def key_literals(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of each string literal in ``source`` that builds a layout key."""
    tree = ast.parse(source)
    parents = _parents(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Expr) or EVENT.match(node.value):
            continue  # a docstring, a bare string statement, a log event
        text = node.value
        if (
            any(p.search(text) for p in KEY_PATTERNS)
            or (FILE_NAMES.match(text) and isinstance(parent, KEY_CONTEXTS))
            or (DIR_NAMES.match(text) and _is_join(parent))
        ):
            yield node.lineno, text


def _package_sources() -> Iterator[Path]:
    for path in sorted(PKG.rglob("*.py")):
        if path != PKG / "layout.py":
            yield path


def test_no_module_but_the_layout_builds_a_key() -> None:
    found = [
        f"{path.relative_to(PKG.parent)}:{line}: {text!r}"
        for path in _package_sources()
        for line, text in key_literals(path.read_text())
    ]
    assert found == [], "keys built outside quiver_spark/layout.py:\n" + "\n".join(found)


PLANTED = [
    'key = f"partitions/{pid}/LEASE"',
    'key = f"{PARTITIONS_DIR}/{pid}/MANIFEST"',
    'name = f"{seq:020d}.arrow"',
    'META = ".meta"',
    'path = stem + ".reason"',
    'ok = key.endswith(".prom")',
    'CHECKPOINT_KEY = "subscribers/CHECKPOINT"',
    'PREFIX = "subscribers/log/"',
    'd = os.path.join(root, "subscribers")',
    'd = os.path.join(root, pid, "wal")',
    'd = backend.join(partition, "quarantine")',
    'NAME = "STORE"',
    'copy = "POLICY.copy"',
    'lock = ".objects.lock"',
    'slot = f"w-{k}"',
    'store.publish_process_metrics(f"consumer-{name}")',
    'key = f"readers/{name}.lost.jsonl"',
    'key = f"{m.METRICS_DIR}/{instance}.prom"',
]


@pytest.mark.parametrize("source", PLANTED)
def test_the_scan_finds_a_planted_key(source: str) -> None:
    assert {line for line, _ in key_literals(f"import os\n{source}\n")} == {2}


def test_the_scan_leaves_prose_and_other_strings_alone() -> None:
    source = '''
"""Module docstring naming ``partitions/<pid>/LEASE`` and ``<seq>.meta``."""
doc = {"segments": 3, "partitions": [], "subscribers": []}
headers = ["PARTITION", "TXN", "WRITER"]
log.warning("quiver.segment.quarantine partition=%s seq=%d", p, s)
raise ValueError(f"segment {seq} of {pid} is damaged")
'''
    assert list(key_literals(source)) == []
