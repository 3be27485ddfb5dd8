"""Explicit options win over the YAML config file, in the sink and in `quiver ...
--config FILE`; a file naming an option by another name than its own is refused, naming
the option meant, never read as something else or ignored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.errors import UnknownOptionError
from quiver_spark.spark.options import store_config

from .conftest import run, write_segments

YAML = """\
segment:
  path: {segs}
  event_time_column: ts
retention:
  max_age: 48h
"""


@pytest.mark.parametrize(
    "explicit, check",
    [
        ({"segment.event_time_column": "ts2"}, lambda c: c.segment.event_time_column == "ts2"),
        ({"retention.max_age": "72h"}, lambda c: c.retention.max_age_hours == 72),
    ],
)
def test_an_explicit_option_wins_over_the_yaml_file(
    tmp_path: Path, explicit: dict[str, str], check: object
) -> None:
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text(YAML.format(segs=tmp_path / "segs_yaml"))
    config = store_config({"path": str(tmp_path / "q"), "config": str(cfg), **explicit})
    assert check(config)  # type: ignore[operator]


@pytest.mark.parametrize(
    "yaml, key, meant",
    [
        ("segments:\n  path: /tmp/x\n", "segments.path", "segment.path"),
        (
            "retention:\n  max_retain_after_ingestion_hours: 48\n",
            "retention.max_retain_after_ingestion_hours",
            "retention.max_age",
        ),
    ],
)
def test_a_yaml_file_with_an_option_under_another_name_is_refused_naming_it(
    tmp_path: Path, yaml: str, key: str, meant: str
) -> None:
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text(yaml)
    with pytest.raises(UnknownOptionError) as e:
        store_config({"path": str(tmp_path / "q"), "config": str(cfg)})
    assert e.value.option == key
    assert f"did you mean {meant!r}?" in str(e.value)


def test_a_cli_option_wins_over_the_yaml_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    cfg = tmp_path / "quiver.yaml"
    cfg.write_text(f"segment:\n  path: {tmp_path / 'segs_yaml'}\n")
    res = run(["status", root, "--config", cfg, "-o", f"segment.path={root / 'segments'}"])
    assert res.exit_code == 0, res.output
