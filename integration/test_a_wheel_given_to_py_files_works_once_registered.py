"""``spark-submit --py-files quiver_spark-*.whl app.py``: the wheel reaches the driver's
``sys.path`` only, and PySpark's lookup of ``format("quiver")`` lists installed modules,
so an application that does not import the package gets ``DATA_SOURCE_NOT_FOUND``
(nothing of this package runs before that error). One that calls
``quiver_spark.register(spark)`` works: the call ships the package to the Python
workers, where the environment has the dependencies installed (here: every one but
this package). Where a dependency is missing, the call fails in one line naming
``--archives``, the way that carries them (docs/cluster.md, section 1).

Run with ``spark-submit`` in local mode from a scratch directory, in environments
hard-linked from the running one without this project's own install. Two
``spark-submit`` runs took 45 s to 95 s on this 2-core machine under other tests'
load: ``make soak`` runs them, ``make test`` does not.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from integration.harness import FreshVenv, _base_python, link_dependencies, run

pytestmark = pytest.mark.soak

APP = """
import tempfile
from pyspark.sql import SparkSession
import quiver_spark
spark = SparkSession.builder.getOrCreate()
quiver_spark.register(spark)
store = tempfile.mkdtemp() + "/quiver"
spark.range(3).write.format("quiver").mode("append").save(store)  # write tasks on workers
print("read schema", spark.read.format("quiver").load(store).schema.simpleString())
spark.stop()
"""


@pytest.fixture(scope="module")
def without_quiver(integration_root: Path) -> FreshVenv:
    """Every dependency installed, this package not."""
    base = integration_root / "py-files"
    (base / "scratch").mkdir(parents=True)
    venv = FreshVenv(base / "venv", base / "scratch")
    run([_base_python(), "-m", "venv", "--without-pip", str(venv.root)], cwd=venv.scratch)
    link_dependencies(venv.site_packages)
    return venv


def spark_submit(venv: FreshVenv, wheel: Path, name: str) -> subprocess.CompletedProcess[str]:
    workdir = venv.scratch / name
    workdir.mkdir()
    shutil.copy2(wheel, workdir / wheel.name)
    (workdir / "app.py").write_text(APP)
    cmd = [str(venv.spark_home / "bin" / "spark-submit"), "--master", "local[1]",
           "--conf", "spark.ui.enabled=false", "--py-files", wheel.name, "app.py"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=workdir,
                          env=venv.env(), check=False)  # fmt: skip


def test_register_ships_a_wheel_given_to_py_files_to_the_workers(
    without_quiver: FreshVenv, quiver_wheel: Path
) -> None:
    proc = spark_submit(without_quiver, quiver_wheel, "registered")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    assert "read schema struct<id:bigint>" in proc.stdout


def test_without_its_dependencies_register_names_archives_in_one_line(
    without_quiver: FreshVenv, quiver_wheel: Path, integration_root: Path
) -> None:
    venv = FreshVenv(integration_root / "py-files-no-crc32c", without_quiver.scratch)
    run([_base_python(), "-m", "venv", "--without-pip", str(venv.root)], cwd=venv.scratch)
    link_dependencies(venv.site_packages)
    for entry in venv.site_packages.glob("crc32c*"):  # hard links: the originals stay
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    proc = spark_submit(venv, quiver_wheel, "no-crc32c")
    assert proc.returncode == 1
    shown = proc.stdout + proc.stderr  # spark-submit passes the driver's stderr to stdout
    (line,) = [ln for ln in shown.splitlines() if ln.startswith("ImportError: ")]
    assert quiver_wheel.name in line, line
    assert "crc32c is not installed" in line and "--archives" in line, line
    assert "DATA_SOURCE_NOT_FOUND" not in shown
