"""docs/kubernetes.md names only what exists: every store option, storage key,
``quiver`` command, log event and repository file it mentions, and its cost table is
what ``bench/cost_at_scale.py`` computes from the measured request counts (so none of
them drifts from the code or the benchmark)."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from quiver_spark.cli import cli
from quiver_spark.objects.options import ANY_ROOT_KEYS
from quiver_spark.option_table import OPTION

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kubernetes.md"
TEXT = DOC.read_text(encoding="utf-8")


def test_every_store_option_docs_kubernetes_names_is_one() -> None:
    named = set(
        re.findall(r"(?<![.\w])((?:segment|wal|retention|subscriber|lease)\.[a-z_]+)", TEXT)
    )
    assert {"wal.path", "lease.ttl", "segment.max_open_duration"} <= named
    assert sorted(n for n in named if n not in OPTION) == []


def test_every_storage_key_docs_kubernetes_names_is_a_clients() -> None:
    keys = set(re.findall(r"(?<![.\w])storage\.([a-z0-9_]+)", TEXT))
    keys |= set(re.findall(r"`((?:aws|google|azure)_[a-z0-9_]+)`", TEXT))
    assert {"aws_role_arn", "aws_web_identity_token_file"} <= keys
    assert sorted(k for k in keys if k not in ANY_ROOT_KEYS) == []


def test_every_quiver_command_docs_kubernetes_names_exists() -> None:
    commands = set(re.findall(r"`quiver ([a-z]+)", TEXT)) | set(
        re.findall(r"\bquiver\s+([a-z]+)\s+(?:s3|PATH)", TEXT)
    )
    assert {"subscribers", "config", "gc", "status"} <= commands
    assert sorted(c for c in commands if c not in cli.commands) == []
    actions = set(re.findall(r"quiver\s+subscribers\s+\S+\s+([a-z]+)", TEXT))
    assert actions and actions <= {"add", "list", "remove"}


def test_every_log_event_docs_kubernetes_names_is_logged_by_the_code() -> None:
    events = set(re.findall(r"`(quiver\.[a-z_]+\.[a-z_]+)`", TEXT))
    assert "quiver.subscriber.registered_late" in events
    source = "\n".join(p.read_text() for p in (REPO / "quiver_spark").rglob("*.py"))
    assert sorted(e for e in events if e not in source) == []


def test_every_file_docs_kubernetes_names_is_in_the_repository() -> None:
    paths = set(
        re.findall(
            r"(?<![\w/.])((?:quiver_spark|bench|integration|tests|conf|docs)/[A-Za-z0-9_./]*[A-Za-z0-9_])",
            TEXT,
        )
    )
    paths |= {
        str((DOC.parent / link).resolve().relative_to(REPO))
        for link in re.findall(r"\]\(([^)#:]+)\)", TEXT)
    }
    assert {"bench/cost_at_scale.py", "conf/kubernetes.yaml"} <= paths
    assert sorted(p for p in paths if not (REPO / p).exists()) == []


def _cost() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cost_at_scale", REPO / "bench" / "cost_at_scale.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cost_table_of_docs_kubernetes_is_what_the_measured_counts_give() -> None:
    args = argparse.Namespace(executors=50, cores=4, subscribers=3, trigger=1.0, max_open=5.0)
    out = _cost().compute(args)
    for label, name in (("sink (200 slots)", "sink"), ("3 subscribers", "subscribers"),
                        ("total", "total")):  # fmt: skip
        r = out[name]
        row = (
            f"| {label} | {r['per_s']:,.0f} | {r['tier1_per_s']:,.0f} | {r['tier2_per_s']:,.0f} "
            f"| {r['usd_per_day']:,.0f} |"
        )
        assert row in TEXT, row
    # the reads the doc names: 40 seals/s, the retention pass after each reading the
    # MANIFEST of every partition the other 199 slots sealed in since its last (its
    # entries stand for the segments' .meta)
    others = out["scale"]["others_sealed_per_pass"]
    assert others == 199
    gets = round(40 * others)
    assert f"{gets:,} GET/s" in TEXT, gets
    assert out["sink"]["by_kind_per_s"]["GET"] >= gets
