"""No module of the package is over 700 lines: a module that grows past it holds more
than one concern and is split by concern (a new module of its package), never squeezed."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "quiver_spark"
LIMIT = 700


def _over(pkg: Path, limit: int) -> list[str]:
    out = []
    for path in sorted(pkg.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out.append(f"{path.relative_to(pkg.parent)}: {lines} lines")
    return out


def test_a_module_over_the_limit_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "small.py").write_text("x = 1\n" * 3)
    (pkg / "sub" / "big.py").write_text("x = 1\n" * 5)
    assert _over(pkg, 4) == ["pkg/sub/big.py: 5 lines"]


def test_no_module_of_the_package_is_over_700_lines() -> None:
    assert len(list(PKG.rglob("*.py"))) > 100  # the package was read at all
    assert _over(PKG, LIMIT) == []
