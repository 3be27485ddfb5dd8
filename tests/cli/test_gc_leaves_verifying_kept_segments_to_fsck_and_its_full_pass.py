"""A plain ``quiver gc`` reads only the ``.meta`` of the segments its pass chooses to
delete (a new process starts from each partition's MANIFEST), so its start cost
follows the partitions, not the retained segments; it says that it did not verify
the segments it keeps, never that they are sound. ``quiver gc --full`` and ``quiver
fsck`` read them and name a damaged one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.stores import int_segments

from .conftest import flip_byte


def quiver(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_gc_leaves_a_kept_segments_damaged_meta_to_fsck_and_its_full_pass(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    int_segments(str(root), [(0, 5), (5, 5), (10, 5)])
    assert quiver("subscribers", root, "add", "s").returncode == 0
    meta = next((root / "segments").glob("*/00000000000000000002.meta"))
    flip_byte(meta, meta.stat().st_size // 2)
    plain = json.loads(quiver("gc", root, "--json").stdout)
    assert plain["damaged"] == [] and plain["retained_verified"] is False
    assert "kept segments not verified" in quiver("gc", root).stdout
    full = json.loads(quiver("gc", root, "--full", "--json").stdout)
    assert [(d["seq"], Path(d["path"]).name) for d in full["damaged"]] == [(2, meta.name)]
    assert full["retained_verified"] is True
    assert meta.name in quiver("gc", root, "--full").stdout
    checked = quiver("fsck", root)
    assert checked.returncode != 0 and meta.name in checked.stdout + checked.stderr
