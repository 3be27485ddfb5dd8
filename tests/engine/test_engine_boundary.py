"""The engine never imports pyspark: only ``quiver_spark.spark`` may."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "quiver_spark"


def test_no_engine_module_names_pyspark_in_an_import() -> None:
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if (PKG / "spark") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(PKG)}:{node.lineno}" for n in names
                          if n.split(".")[0] == "pyspark"]  # fmt: skip
    assert offenders == [], f"pyspark imported outside quiver_spark/spark/: {offenders}"


def test_importing_the_engine_and_cli_loads_no_pyspark_module() -> None:
    code = (
        "import sys, quiver_spark, quiver_spark.cli, quiver_spark.store;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
