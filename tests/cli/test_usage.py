"""Options after the command name, and every command's own ``--help``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from quiver_spark.cli import cli

from .conftest import Built, run


@pytest.fixture(autouse=True)
def _restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("QUIVER_LOG_LEVEL", raising=False)  # -v alone decides here
    logger = logging.getLogger("quiver_spark")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.mark.parametrize(
    "argv",
    [["-v", "status", "{root}"], ["status", "{root}", "-v"], ["status", "-v", "{root}"],
     ["subscribers", "{root}", "list", "--verbose"], ["gc", "{root}", "--dry-run", "-v"]],
    ids=["before", "after-path", "after-command", "subscribers", "gc"],
)  # fmt: skip
def test_verbose_works_before_and_after_the_command(built: Built, argv: list[str]) -> None:
    res = run([str(built.root) if a == "{root}" else a for a in argv])
    assert res.exit_code == 0, res.output
    assert " INFO quiver_spark." in res.stderr  # the ack log's open is logged at info


def test_without_verbose_nothing_is_logged(built: Built) -> None:
    res = run(["status", built.root])
    assert res.exit_code == 0 and res.stderr == ""


def test_verbose_counts_add_up_across_the_command_name(built: Built) -> None:
    run(["-v", "status", built.root, "-v"])
    assert logging.getLogger("quiver_spark").level == logging.DEBUG


HELP = {
    "status": ["PATH", "--partition", "--subscriber", "--json", "--verbose"],
    "subscribers": ["PATH", "list", "add", "remove", "NAME", "--start", "--create",
                    "--partition", "--subscriber"],
    "txns": ["PATH", "list", "discard", "QUERY_ID", "--yes", "query id"],
    "config": ["PATH", "show", "set", "KEY=VALUE", "--generation", "retention.size_cap"],
    "fsck": ["PATH"],
    "gc": ["PATH", "--dry-run"],
    "metrics": ["PATH"],
}  # fmt: skip


def test_config_help_lists_every_policy_option() -> None:
    from quiver_spark.policy import POLICY_OPTIONS

    out = run(["config", "--help"]).stdout
    assert all(o in out for o in POLICY_OPTIONS), out


def test_every_command_is_covered_here() -> None:
    assert sorted(HELP) == sorted(cli.commands)


@pytest.mark.parametrize("command", sorted(HELP))
def test_every_command_has_its_own_help_showing_its_arguments(command: str) -> None:
    res = run([command, "--help"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Usage: ") and f" {command} [OPTIONS] PATH" in res.stdout
    for word in HELP[command]:
        assert word in res.stdout, f"{command} --help does not mention {word}"


@pytest.mark.parametrize(
    "argv", [["subscribers", "/x", "add", "--help"], ["txns", "discard", "--help"],
             ["config", "/x", "set", "-h"]],
)  # fmt: skip
def test_help_after_the_verb_shows_the_commands_help(argv: list[str]) -> None:
    res = run(argv)
    assert res.exit_code == 0 and f" {argv[0]} [OPTIONS] PATH" in res.stdout
