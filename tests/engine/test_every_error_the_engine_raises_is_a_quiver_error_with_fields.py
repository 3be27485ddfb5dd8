"""Every error quiver_spark raises is a class of ``quiver_spark.errors``: a
:class:`~quiver_spark.errors.QuiverError` with fields (the value, what is allowed, the
key, partition or seq concerned), which also inherits the builtin its callers catch
(``InvalidArgumentError(QuiverError, ValueError)``). The package is read with ``ast``:
a plain ``raise QuiverError(...)`` or a raise of a builtin exception fails this test,
except the few raises below, each kept for the reason it gives. A re-raise (``raise``,
``raise e``) names no class and is not concerned."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import quiver_spark

PACKAGE = Path(quiver_spark.__file__).parent

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), BaseException)
)

ALLOWED: dict[tuple[str, str, str], str] = {
    ("__init__.py", "__getattr__", "AttributeError"): (
        "a module __getattr__ must raise AttributeError for a name it does not have"
    ),
    ("cli/__init__.py", "__getattr__", "AttributeError"): (
        "a module __getattr__ must raise AttributeError for a name it does not have"
    ),
    ("cli/fsck.py", "fsck", "SystemExit"): "the command's exit status, not an error",
    ("cli/gc.py", "gc", "SystemExit"): "the command's exit status, not an error",
    ("cli/status.py", "status", "SystemExit"): "the command's exit status, not an error",
    ("control/cas.py", "update", "TypeError"): (
        "a call missing both decode and read: a programming error, as a missing argument is"
    ),
    ("subscribers/objects_journal.py", "open", "TypeError"): (
        "a call missing objects=: a programming error, as a missing argument is"
    ),
    ("control/lease.py", "decode_lease", "TypeError"): (
        "caught a few lines below and raised as the CorruptionError naming the lease"
    ),
    ("control/manifest.py", "from_body", "ValueError"): (
        "caught by its caller, the MANIFEST's decoding, and raised as a CorruptionError"
    ),
    ("policy.py", "from_body", "ValueError"): (
        "caught a few lines below and raised as the CorruptionError naming the POLICY"
    ),
    ("fsck/advisory.py", "lock_holder_info", "ValueError"): (
        "caught at once and reported as an fsck warning"
    ),
    ("fsck/advisory.py", "_check_lost_log", "ValueError"): (
        "caught at once and reported as an fsck warning"
    ),
    ("objects/base.py", "create_or_same", "AssertionError"): (
        "after a loop that returns or raises: never reached"
    ),
    ("objects/writes.py", "retry_conflicts", "AssertionError"): (
        "after a loop that returns or raises: never reached"
    ),
    ("segment/reader.py", "read_batch", "IndexError"): (
        "an index out of range of a sequence of record batches, as a list's is"
    ),
}
"""(module under quiver_spark, enclosing function, builtin) -> why the raise stays."""


def raises_of(path: Path) -> list[tuple[str, str, int]]:
    """``(enclosing function, class raised, line)`` of each raise naming a class."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name):
                    called = isinstance(child.exc, ast.Call)
                    if exc.id in BUILTIN_EXCEPTIONS or (exc.id == "QuiverError" and called):
                        found.append((function, exc.id, child.lineno))
            visit(child, function)

    visit(ast.parse(path.read_text(), str(path)), "<module>")
    return found


def offending_raises(package: Path) -> tuple[list[str], set[tuple[str, str, str]]]:
    """The raises not allowed (``module:line: class in function``) and the allow-list
    entries that matched a raise."""
    bad: list[str] = []
    used: set[tuple[str, str, str]] = set()
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        for function, name, line in raises_of(path):
            key = (module, function, name)
            if name != "QuiverError" and key in ALLOWED:
                used.add(key)
                continue
            what = "plain QuiverError" if name == "QuiverError" else name
            bad.append(f"quiver_spark/{module}:{line}: {what} in {function}()")
    return bad, used


def test_every_raise_in_the_package_is_a_quiver_error_class_with_fields() -> None:
    bad, _ = offending_raises(PACKAGE)
    assert not bad, (
        "raise a class of the quiver_spark/errors/ package (a QuiverError with fields, "
        "inheriting the builtin callers catch) instead of:\n  " + "\n  ".join(bad)
    )


def test_every_builtin_raise_kept_is_still_there_with_its_reason() -> None:
    _, used = offending_raises(PACKAGE)
    assert set(ALLOWED) - used == set(), "allowed raises that no longer exist"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_a_planted_builtin_or_plain_quiver_error_raise_is_found(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text(
        "from quiver_spark.errors import QuiverError\n\n\n"
        "def f(x: int) -> None:\n"
        "    if x < 0:\n"
        "        raise ValueError(f'negative {x}')\n"
        "    if x > 9:\n"
        "        raise QuiverError('too big')\n"
        "    try:\n"
        "        g()\n"
        "    except KeyError:\n"
        "        raise\n"
    )
    bad, _ = offending_raises(tmp_path)
    assert bad == [
        "quiver_spark/planted.py:6: ValueError in f()",
        "quiver_spark/planted.py:8: plain QuiverError in f()",
    ]
