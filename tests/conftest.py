"""What every test of the suite shares."""

from __future__ import annotations

import ast
import functools
import logging
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver_spark.control import lease
from quiver_spark.objects.memory import reset_memory
from tests.scratch import SCRATCH

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    # A test that sends Ctrl-C to a `quiver` process stands for a user at a terminal,
    # where SIGINT is not ignored. A run started as a background job (`make test &`,
    # nohup) inherits an ignored SIGINT, and so would every process a test starts: a
    # handler here (the default one) is reset to the default action in each child, as
    # a terminal's shell gives it. Only an ignored one is replaced; Ctrl-C on this run
    # behaves as pytest makes it.
    signal.signal(signal.SIGINT, signal.default_int_handler)

KEEP_FAILED_S = 2 * 3600
"""How long the scratch directory of a run with failures stays in memory (a run of the
whole suite, and so a directory in use, takes well under an hour)."""


@pytest.fixture(scope="session")
def tmp_path_factory(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[pytest.TempPathFactory]:
    """``tmp_path`` and ``tmp_path_factory`` of ``tests/`` under :data:`tests.scratch.SCRATCH`
    (memory, where a sync costs nothing; the module says why that checks the same):
    one directory per run and worker, removed after the run when every test passed,
    else kept for a look (removed, as any scratch directory a test left behind, by a
    run two hours later: memory is shared by everyone on the machine)."""
    # the disk's one first, as before: integration/ takes its directories from it,
    # and a SparkSession started later points TMPDIR at its scratch here
    tmp_path_factory.getbasetemp()
    if SCRATCH is None:
        yield tmp_path_factory
        return
    runs = Path(SCRATCH)
    for old in runs.iterdir():
        try:
            if time.time() - old.stat().st_mtime > KEEP_FAILED_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    base = Path(tempfile.mkdtemp(prefix="run-", dir=runs))
    config = request.config
    factory = pytest.TempPathFactory(
        given_basetemp=base,
        retention_count=int(config.getini("tmp_path_retention_count")),
        retention_policy=config.getini("tmp_path_retention_policy"),
        trace=config.trace.get("tmpdir"),
        _ispytest=True,
    )
    yield factory
    if request.session.testsfailed == 0:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def quiver_logging_restored() -> Iterator[None]:
    """A ``quiver`` command run in-process configures the package's logger for a
    terminal (its own handler, no propagation); put it back after each test, so a later
    test's ``caplog`` still sees the package's log records."""
    logger = logging.getLogger("quiver_spark")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


@pytest.fixture(autouse=True)
def no_store_profile_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``QUIVER_CONFIG`` of the environment the suite runs in never reaches a test: a
    test that wants a store profile names one itself."""
    monkeypatch.delenv("QUIVER_CONFIG", raising=False)


@pytest.fixture
def observed_leases_forgotten() -> Iterator[None]:
    """The lease versions this process watched (the takeover clocks of §8.2) are
    forgotten after the test, so a later test's lease of the same key starts unseen."""
    yield
    lease._seen.clear()


@pytest.fixture
def fresh_memory(observed_leases_forgotten: None) -> Iterator[None]:
    """The in-process ``memory://`` buckets are empty when the test starts and again
    after it (for test modules that ask: ``pytest.mark.usefixtures("fresh_memory")``)."""
    reset_memory()
    yield
    reset_memory()


@pytest.fixture
def bucket(fresh_memory: None) -> str:
    """A ``memory://`` bucket name no other test uses, in fresh memory."""
    return f"b-{uuid.uuid4().hex[:8]}"


ROOT = Path(__file__).resolve().parents[1]
"""The directory test ids are relative to."""

SESSION_FIXTURES = frozenset({"spark", "spark_profile"})
"""The fixtures of ``tests/spark/conftest.py`` that hold the one SparkSession."""


@functools.cache
def _uses_the_session(path: str) -> bool:
    """Whether a test file asks for the shared SparkSession anywhere: a function (test or
    fixture) taking one of :data:`SESSION_FIXTURES`, or one named in a string
    (``usefixtures``, ``getfixturevalue``). A file that cannot be read counts as one."""
    try:
        tree = ast.parse((ROOT / path).read_text())
    except (OSError, SyntaxError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            if names & SESSION_FIXTURES:
                return True
        elif isinstance(node, ast.Constant) and node.value in SESSION_FIXTURES:
            return True
    return False


SESSION_TAKERS = frozenset({"integration/test_promises_when_processes_die.py"})
"""Files outside ``tests/spark`` whose Spark scenarios take the session already running in
their process (``SparkSession.getActiveSession``) and start one of their own only when
there is none: in the session's group they run after ``tests/spark``, on its session,
instead of starting a second Spark application on the other worker."""


def _group(nodeid: str) -> tuple[int, str]:
    """The unit one ``pytest -n`` worker runs whole, and its rank (lower is handed out
    first): every test of the one SparkSession (and of :data:`SESSION_TAKERS`), then
    each integration file (the long ones) and each file of ``tests/spark`` that never
    asks for the session (one starts a Spark application of its own: it runs on the
    other worker meanwhile), the generative tests, then every other file."""
    path = nodeid.split("::")[0]
    if path in SESSION_TAKERS:
        return 0, "tests/spark"
    if path.startswith("tests/spark/"):
        return (0, "tests/spark") if _uses_the_session(path) else (1, path)
    if path.startswith("integration/"):
        return 1, path
    if "state_space" in path:
        return 2, path
    return 3, path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` (``pytest -n 3``): each worker takes whole groups (:func:`_group`),
    so there is one SparkSession per run as in a single process, and a file's tests run
    in their order in one process."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)[1]

    return Groups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` the long groups come first (:func:`_group`): a worker's last
    group is then a short one. :data:`SESSION_TAKERS` come after ``tests/spark``, whose
    fixture starts the session they take."""
    if hasattr(config, "workerinput"):
        items.sort(
            key=lambda item: (
                _group(item.nodeid)[0],
                item.nodeid.split("::")[0] in SESSION_TAKERS,
            )
        )
