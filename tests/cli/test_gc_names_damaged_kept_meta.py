"""``quiver gc`` names a kept segment whose ``.meta`` is damaged, even though a new
process starts from each partition's MANIFEST and its pass reads only the ``.meta`` of
the segments it chooses to delete."""

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


def test_gc_names_the_damaged_meta_of_a_segment_it_keeps(tmp_path: Path) -> None:
    root = tmp_path / "store"
    int_segments(str(root), [(0, 5), (5, 5), (10, 5)])
    assert quiver("subscribers", root, "add", "s").returncode == 0
    meta = next((root / "segments").glob("*/00000000000000000002.meta"))
    flip_byte(meta, meta.stat().st_size // 2)
    doc = json.loads(quiver("gc", root, "--json").stdout)
    assert [(d["seq"], Path(d["path"]).name) for d in doc["damaged"]] == [(2, meta.name)]
    assert meta.name in quiver("gc", root).stdout
