"""Every exception quiver_spark defines lives in the errors package
(``quiver_spark/errors/``: its ``__init__`` and its modules, which it re-exports) and
derives from :class:`~quiver_spark.errors.QuiverError`: one hierarchy, caught at its
root and told apart by class and fields, never a class hidden in the module that raises
it.

Every module of the package is imported and every ``class`` statement in its source
(nested ones too) is looked at: one whose base is an exception is an exception class.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import quiver_spark
from quiver_spark import errors
from quiver_spark.errors import QuiverError


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    yield package
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        yield importlib.import_module(info.name)


def _resolve(node: ast.expr, module: ModuleType) -> object:
    """What a base-class expression (``Name`` or dotted ``Attribute``) names in
    ``module`` (or among the builtins), or None."""
    if isinstance(node, ast.Name):
        return getattr(module, node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, module)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _is_exception(node: ast.ClassDef, module: ModuleType) -> bool:
    for base in node.bases:
        cls = _resolve(base, module)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return True
    return False


def _exception_classes(
    package: ModuleType = quiver_spark,
) -> Iterator[tuple[str, ast.ClassDef, ModuleType]]:
    """``(file, class statement, module)`` of every exception class ``package`` defines."""
    top = Path(package.__file__ or "").resolve().parent.parent
    for module in _modules(package):
        path = Path(module.__file__ or "").resolve()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_exception(node, module):
                yield str(path.relative_to(top)), node, module


def classes_outside_errors(package: ModuleType = quiver_spark) -> list[str]:
    """``file:line Class`` of each exception class defined outside ``package.errors``
    and its modules."""
    home = f"{package.__name__}.errors"
    return [
        f"{file}:{node.lineno} {node.name}"
        for file, node, module in _exception_classes(package)
        if module.__name__ != home and not module.__name__.startswith(f"{home}.")
    ]


def test_every_exception_class_is_defined_in_the_errors_package() -> None:
    elsewhere = classes_outside_errors()
    assert not elsewhere, "exception classes outside quiver_spark/errors/:\n" + "\n".join(elsewhere)


def test_a_class_planted_outside_the_errors_package_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module beside the errors package (even one named like it) is outside it; the
    package's own modules are not."""
    planted = tmp_path / "planted_pkg"
    (planted / "errors").mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "errors" / "__init__.py").write_text("class BaseError(Exception):\n    pass\n")
    (planted / "errors" / "storage.py").write_text(
        "from . import BaseError\n\n\nclass StoreError(BaseError):\n    pass\n"
    )
    (planted / "errors_extra.py").write_text(
        "from .errors import BaseError\n\n\nclass Hidden(BaseError):\n    pass\n"
    )
    (planted / "reader.py").write_text(
        "def f() -> None:\n    class Local(ValueError):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = classes_outside_errors(importlib.import_module("planted_pkg"))
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "planted_pkg"]:
            del sys.modules[name]
    assert sorted(found) == [
        "planted_pkg/errors_extra.py:4 Hidden",
        "planted_pkg/reader.py:2 Local",
    ]


def test_every_exception_class_derives_from_quiver_error() -> None:
    outside = [
        f"{file}:{node.lineno} {node.name}"
        for file, node, module in _exception_classes()
        if not issubclass(getattr(module, node.name, Exception), QuiverError)
    ]
    assert not outside, "exception classes that are not a QuiverError:\n" + "\n".join(outside)


def test_every_class_of_the_errors_package_but_the_missing_kinds_is_a_quiver_error() -> None:
    """The errors package holds the hierarchy and the enum its errors carry, nothing
    else, and every class of its modules is importable from ``quiver_spark.errors`` and
    named as its own there (``quiver_spark.errors.<Kind>``, the name Spark shows)."""
    defined = {
        name: obj
        for module in _modules(errors)
        for name, obj in vars(module).items()
        if isinstance(obj, type) and obj.__module__.startswith(errors.__name__)
    }
    assert {n: c.__module__ for n, c in defined.items()} == dict.fromkeys(defined, errors.__name__)
    assert all(getattr(errors, n, None) is c for n, c in defined.items())
    others = sorted(n for n, c in defined.items() if not issubclass(c, QuiverError))
    assert others == ["MissingKind"]
