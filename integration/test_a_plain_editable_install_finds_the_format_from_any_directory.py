"""``pip install -e .`` alone, typed in a clone, makes ``format("quiver")`` work in a
Python started anywhere else: PySpark finds the data source by listing the installed
modules named ``pyspark_*`` (``pkgutil.iter_modules``), which does not see what an
editable install serves only through an import hook; the build configuration
(``package-dir`` in pyproject.toml) makes setuptools' editable install put the checkout
on ``sys.path`` instead (a ``.pth`` file), in its default mode.

The venv starts from the dependencies the running test environment holds (hard links,
without this project's install), so pip installs only the project; the program is a
user's: run from a scratch directory, no ``PYTHONPATH``, no registration call. It took
41 s to 66 s on this 2-core machine under other tests' load, and runs in ``make test``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from integration.harness import (
    FreshVenv,
    _base_python,
    copy_checkout,
    link_dependencies,
    run,
)

APP = """
import os, sys, tempfile
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
import pyspark_quiver
print("pyspark_quiver from", pyspark_quiver.__file__)
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
store = tempfile.mkdtemp() + "/quiver"
spark.range(3).write.format("quiver").mode("append").save(store)
print("read schema", spark.read.format("quiver").load(store).schema.simpleString())
spark.stop()
"""


def test_format_quiver_works_outside_the_checkout_after_pip_install_e(
    integration_root: Path,
) -> None:
    base = integration_root / "editable"
    checkout = copy_checkout(base / "checkout")
    scratch = base / "scratch"
    scratch.mkdir()
    venv = FreshVenv(base / "venv", scratch)
    run([_base_python(), "-m", "venv", "--without-pip", str(venv.root)], cwd=scratch)
    link_dependencies(venv.site_packages)
    env = venv.env()
    run([str(venv.python), "-m", "pip", "install", "-q", "-e", "."], cwd=checkout, env=env)

    (scratch / "app.py").write_text(APP)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"):
        env.pop(name)
    proc = subprocess.run([str(venv.python), "app.py"], capture_output=True, text=True,
                          timeout=300, cwd=scratch, env=env, check=False)  # fmt: skip
    assert "DATA_SOURCE_NOT_FOUND" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"pyspark_quiver from {checkout}/pyspark_quiver/__init__.py" in proc.stdout
    assert "read schema struct<id:bigint>" in proc.stdout, proc.stdout
