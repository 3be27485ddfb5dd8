"""``quiver gc --full`` says every retained segment was verified
(``retained_verified: true``): a segment its MANIFEST lists whose ``.meta`` is gone, or
whose ``.arrow`` is shorter than published, is one ``quiver fsck`` calls a problem, so
gc --full names it damaged (by its ``.arrow``) instead of an empty list over it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stores import int_segments


def quiver(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("damage", ["meta_removed", "arrow_truncated"])
def test_gc_full_never_reads_verified_over_a_damaged_kept_segment(
    tmp_path: Path, damage: str
) -> None:
    root = tmp_path / "store"
    int_segments(str(root), [(0, 5), (5, 5), (10, 5)])
    assert quiver("subscribers", root, "add", "s").returncode == 0
    meta = next((root / "segments").glob("*/00000000000000000002.meta"))
    arrow = meta.with_suffix(".arrow")
    if damage == "meta_removed":
        meta.unlink()
    else:
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    assert quiver("fsck", root).returncode != 0  # the store is damaged
    full = json.loads(quiver("gc", root, "--full", "--json").stdout)
    assert full["retained_verified"] is True
    assert [(d["seq"], Path(d["path"]).name) for d in full["damaged"]] == [(2, arrow.name)]
    assert arrow.name in quiver("gc", root, "--full").stdout
