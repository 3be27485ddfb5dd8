"""Explicit options win over the YAML config file, whatever spelling the file uses.

A YAML file written with an accepted earlier spelling (`segments.path`,
`eventTimeColumn`, `retention.max_retain_after_ingestion_hours`) and an explicit
option under the canonical name are one option: the explicit value is used, by the
sink and by `quiver ... --config FILE`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.spark.options import store_config

from .conftest import run, write_segments

YAML = """\
segments:
  path: {segs}
eventTimeColumn: ts
retention:
  max_retain_after_ingestion_hours: 48
"""


@pytest.mark.parametrize(
    "explicit, check",
    [
        ({"segment.event_time_column": "ts2"}, lambda c: c.segment.event_time_column == "ts2"),
        ({"retention.max_age": "72h"}, lambda c: c.retention.max_age_hours == 72),
    ],
)
def test_explicit_canonical_option_wins_over_yaml_alias(
    tmp_path: Path, explicit: dict[str, str], check: object
) -> None:
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text(YAML.format(segs=tmp_path / "segs_yaml"))
    config = store_config({"path": str(tmp_path / "q"), "config": str(cfg), **explicit})
    assert check(config)  # type: ignore[operator]


def test_cli_option_wins_over_yaml_alias(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text(f"segments:\n  path: {tmp_path / 'segs_yaml'}\n")
    res = run(["status", root, "--config", cfg, "-o", f"segment.path={root / 'segments'}"])
    assert res.exit_code == 0, res.output
