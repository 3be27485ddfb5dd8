"""The package's modules import one another without a cycle, and ``objects/``, the
floor every part stands on, imports nothing from the parts above it.

Every import counts, those inside functions too: an import deferred to break a cycle
still ties the two modules together, so a lazy import is no way around this test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "quiver_spark"
NAME = PKG.name

ABOVE_OBJECTS = ("segment", "partition", "subscribers", "spark", "cli")
"""Subpackages ``objects/`` must never import from."""


def _module_of(path: Path, pkg: Path) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(pkg: Path) -> dict[str, Path]:
    return {_module_of(p, pkg): p for p in sorted(pkg.rglob("*.py"))}


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` of each module of the package that ``module`` imports."""
    top = module.split(".")[0]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    yield _nearest(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != top:
                continue
            for alias in node.names:  # `from . import format` names a module
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else _nearest(target, known)), node.lineno


def _nearest(name: str, known: dict[str, Path]) -> str:
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def _graph(pkg: Path = PKG) -> dict[str, dict[str, int]]:
    known = _modules(pkg)
    graph: dict[str, dict[str, int]] = {m: {} for m in known}
    for module, path in known.items():
        for target, line in _imported(module, path, known):
            if target != module:
                graph[module].setdefault(target, line)
            # importing ``pkg.sub.x`` first runs ``pkg/sub/__init__``: a module outside
            # ``pkg.sub`` depends on that package too (the top package excepted: every
            # import runs it, and it is the entry, not a part)
            for parent in _packages_above(target):
                if parent in known and not _within(module, parent):
                    graph[module].setdefault(parent, line)
    return graph


def _packages_above(name: str) -> Iterator[str]:
    """The packages ``name`` lies in, below the top package."""
    parts = name.split(".")
    for n in range(2, len(parts)):
        yield ".".join(parts[:n])


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the package is deeper than a comfortable
    recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    out.append(sorted(component))
    return out


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    arrows = [
        f"{a} -> {b} (line {line})"
        for a in component
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return "; ".join(arrows)


def test_the_import_graph_finds_a_cycle_where_there_is_one() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert sorted(map(sorted, _strongly_connected(graph))) == [["a", "b", "c"], ["d"]]


def test_the_import_graph_sees_relative_absolute_and_deferred_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("import os\n")
    (pkg / "format.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .low import x\n")
    (pkg / "sub" / "low.py").write_text("from ..errors import E\n")
    high = [
        "from .. import format as fmt",
        "import pkg.errors",
        "def f():",
        "    from pkg.sub.low import y",
    ]
    (pkg / "sub" / "high.py").write_text("\n".join(high) + "\n")
    assert _graph(pkg) == {
        "pkg": {},
        "pkg.errors": {},
        "pkg.format": {},
        "pkg.sub": {"pkg.sub.low": 1},
        "pkg.sub.high": {"pkg.format": 1, "pkg.errors": 2, "pkg.sub.low": 4},
        "pkg.sub.low": {"pkg.errors": 1},
    }


def test_an_import_of_a_subpackages_module_depends_on_the_subpackage(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from ..low import x\n")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "low.py").write_text("from .sub.leaf import y\n")
    graph = _graph(pkg)
    assert graph["pkg.low"] == {"pkg.sub.leaf": 1, "pkg.sub": 1}
    assert [c for c in _strongly_connected(graph) if len(c) > 1] == [["pkg.low", "pkg.sub"]]


def test_no_two_modules_of_the_package_import_each_other_even_indirectly() -> None:
    graph = _graph()
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == [], "import cycles:\n" + "\n".join(_describe(c, graph) for c in cycles)


def test_objects_imports_nothing_from_the_parts_above_it() -> None:
    graph = _graph()
    above = tuple(f"{NAME}.{p}" for p in ABOVE_OBJECTS)
    offenders = [
        f"{module} -> {target} (line {line})"
        for module, targets in graph.items()
        if module == f"{NAME}.objects" or module.startswith(f"{NAME}.objects.")
        for target, line in targets.items()
        if target in above or target.startswith(tuple(a + "." for a in above))
    ]
    assert offenders == []
