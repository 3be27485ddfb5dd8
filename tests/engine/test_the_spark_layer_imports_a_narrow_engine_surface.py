"""The Spark layer translates Spark's calls into engine calls through a narrow surface:
``quiver_spark/spark/`` imports at most five of the engine's top-level modules or
packages (the store and subscription facades, errors, options, logs), so every
decision it could be tempted to make stays in the engine, where it runs without a JVM.

Every import counts, those inside functions too, and no module is exempt.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "quiver_spark"
LIMIT = 5


def _engine_modules(path: Path, pkg: Path) -> dict[str, int]:
    """The engine's top-level modules or packages ``path`` (a file under ``pkg``)
    imports, with a line of each."""
    package = ["quiver_spark", *path.parent.relative_to(pkg).parts]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from quiver_spark import store` and `from .. import format` name modules
            named = module in ("quiver_spark", "quiver_spark.spark") or not node.module
            targets = [f"{module}.{a.name}" for a in node.names] if named else [module]
        for target in targets:
            parts = target.split(".")
            if parts[0] == "quiver_spark" and len(parts) > 1 and parts[1] != "spark":
                found.setdefault(parts[1], node.lineno)
    return found


def engine_imports(pkg: Path = PKG) -> dict[str, list[str]]:
    """Each engine module or package that ``pkg``'s Spark layer imports, and where."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((pkg / "spark").rglob("*.py")):
        for module, line in _engine_modules(path, pkg).items():
            where[module].append(f"{path.relative_to(pkg.parent)}:{line}")
    return dict(where)


def test_the_spark_layer_imports_at_most_five_engine_modules() -> None:
    found = engine_imports()
    assert len(found) <= LIMIT, (
        f"quiver_spark/spark/ imports {len(found)} engine modules or packages, at most "
        f"{LIMIT} allowed; reach the others through the store or subscription facade: "
        + "; ".join(f"{m} ({', '.join(w)})" for m, w in sorted(found.items()))
    )


def test_the_count_sees_every_spelling_of_an_engine_import(tmp_path: Path) -> None:
    """Relative, absolute, package-level and function-level imports are all counted,
    ``logs`` too (a module the count missed would widen the surface unseen)."""
    layer = tmp_path / "quiver_spark" / "spark"
    layer.mkdir(parents=True)
    (layer / "a.py").write_text(
        "from .. import format as fmt\n"
        "from ..commits import CommitLog\n"
        "from quiver_spark.fs import partition_locked\n"
        "import quiver_spark.pruning\n"
        "from quiver_spark import dataloss\n"
        "from ..logs import configure_worker_logging\n"
        "from . import b\n"
        "from .b import x\n"
        "def f():\n"
        "    from ..objects.roots import open_objects\n"
    )
    found = engine_imports(tmp_path / "quiver_spark")
    assert sorted(found) == ["commits", "dataloss", "format", "fs", "logs", "objects", "pruning"]
