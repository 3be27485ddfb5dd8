"""`quiver metrics --json` prints JSON (or refuses the flag), never another format."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import run, write_segments


def test_metrics_json_is_json_or_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    res = run(["metrics", root, "--json"])
    if res.exit_code == 0:
        json.loads(res.stdout)  # raises on the Prometheus text it prints today
    else:
        assert "--json" in res.output
