"""Every exception quiver_spark defines lives in ``quiver_spark/errors.py`` and derives
from :class:`~quiver_spark.errors.QuiverError`: one hierarchy, caught at its root and
told apart by class and fields, never a class hidden in the module that raises it.

Every module of the package is imported and every ``class`` statement in its source
(nested ones too) is looked at: one whose base is an exception is an exception class.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import quiver_spark
from quiver_spark import errors
from quiver_spark.errors import QuiverError

PKG = Path(quiver_spark.__file__).resolve().parent


def _modules() -> Iterator[ModuleType]:
    yield quiver_spark
    for info in pkgutil.walk_packages(quiver_spark.__path__, "quiver_spark."):
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


def _exception_classes() -> Iterator[tuple[str, ast.ClassDef, ModuleType]]:
    """``(file, class statement, module)`` of every exception class the package defines."""
    for module in _modules():
        path = Path(module.__file__ or "")
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_exception(node, module):
                yield str(path.relative_to(PKG.parent)), node, module


def test_every_exception_class_is_defined_in_errors_py() -> None:
    elsewhere = [
        f"{file}:{node.lineno} {node.name}"
        for file, node, module in _exception_classes()
        if module is not errors
    ]
    assert not elsewhere, "exception classes outside quiver_spark/errors.py:\n" + "\n".join(
        elsewhere
    )


def test_every_exception_class_derives_from_quiver_error() -> None:
    outside = [
        f"{file}:{node.lineno} {node.name}"
        for file, node, module in _exception_classes()
        if not issubclass(getattr(module, node.name, Exception), QuiverError)
    ]
    assert not outside, "exception classes that are not a QuiverError:\n" + "\n".join(outside)


def test_every_class_in_errors_py_but_the_missing_kinds_is_a_quiver_error() -> None:
    """errors.py holds the hierarchy and the enum its errors carry, nothing else."""
    classes = {
        name: obj
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and obj.__module__ == errors.__name__
    }
    others = sorted(n for n, c in classes.items() if not issubclass(c, QuiverError))
    assert others == ["MissingKind"]
