"""Bad paths and malformed flags: exit 2, a message naming what was wrong, no file touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Built, run, tree

COMMANDS = [["status"], ["fsck"], ["gc"], ["subscribers", "{path}", "list"]]


def _argv(cmd: list[str], path: Path) -> list[str]:
    if "{path}" in cmd:
        return [str(path) if a == "{path}" else a for a in cmd]
    return [*cmd, str(path)]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_a_missing_path_exits_2_and_says_it_does_not_exist(cmd: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    res = run(_argv(cmd, missing))
    assert res.exit_code == 2
    assert f"{missing}: no such directory" in res.stderr
    assert not missing.exists()


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_a_directory_without_a_store_exits_2_and_says_it_is_not_quiver(
    cmd: list[str], tmp_path: Path
) -> None:
    (tmp_path / "other.txt").write_text("hello")
    res = run(_argv(cmd, tmp_path))
    assert res.exit_code == 2
    assert "is not a Quiver store" in res.stderr and "STORE" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt"]


def test_a_regular_file_is_not_a_store(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    res = run(["status", f])
    assert res.exit_code == 2 and "is a file, not a Quiver store" in res.stderr


@pytest.mark.parametrize(
    ("flag", "option", "value", "allowed"),
    [
        ("retention.size_cap=12 parsecs", "retention.size_cap", "12 parsecs", "such as 512KB"),
        ("retention.size_cap_policy=sometimes", "retention.size_cap_policy", "sometimes",
         "backpressure | drop_oldest"),
        ("segment.max_open_duration=soon", "segment.max_open_duration", "soon", "ms, s, m, h"),
        ("retention.max_age=-1h", "retention.max_age", "-1h", "a duration such as 25ms"),
        ("retention.size_cap", "--option", "retention.size_cap", "KEY=VALUE"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_a_bad_option_value_names_the_option_the_value_and_what_is_allowed(
    built: Built, cmd: list[str], flag: str, option: str, value: str, allowed: str
) -> None:
    before = tree(built.root)
    res = run([*_argv(cmd, built.root), "--option", flag])
    assert res.exit_code == 2
    assert f"invalid value for option {option!r}: {value!r}" in res.stderr
    assert allowed in res.stderr
    assert res.stdout == ""
    assert tree(built.root) == before


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_an_option_typo_is_reported_as_an_unknown_option_with_the_near_miss(
    built: Built, cmd: list[str]
) -> None:
    before = tree(built.root)
    res = run([*_argv(cmd, built.root), "--option", "segment.target_sise=32MB"])
    assert res.exit_code == 2
    first = res.stderr.splitlines()[0]
    assert first.startswith("Error: unknown option 'segment.target_sise' (value '32MB')"), first
    assert "did you mean 'segment.target_size'?" in first
    assert tree(built.root) == before


def test_a_missing_config_file_is_a_usage_error(built: Built, tmp_path: Path) -> None:
    res = run(["status", built.root, "--config", tmp_path / "nope.yaml"])
    assert res.exit_code == 2
    assert "--config" in res.stderr and "nope.yaml" in res.stderr and "readable YAML" in res.stderr


def test_a_bad_start_position_lists_the_allowed_ones(built: Built) -> None:
    before = tree(built.root)
    res = run(["subscribers", built.root, "add", "x", "--start", "middle"])
    assert res.exit_code == 2
    assert "'--start'" in res.stderr and "'middle'" in res.stderr
    assert "earliest" in res.stderr and "latest" in res.stderr
    assert tree(built.root) == before


def test_an_unknown_subscribers_action_lists_the_allowed_ones(built: Built) -> None:
    res = run(["subscribers", built.root, "rename", "x"])
    assert res.exit_code == 2
    assert "'rename'" in res.stderr and "list" in res.stderr and "remove" in res.stderr
