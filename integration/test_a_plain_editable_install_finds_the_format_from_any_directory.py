"""``pip install -e .`` alone, typed in a clone, makes ``format("quiver")`` work in a
Python started anywhere else: PySpark finds the data source by listing the installed
modules named ``pyspark_*`` (``pkgutil.iter_modules``), which does not see what an
editable install serves only through an import hook; the build configuration
(``package-dir`` in pyproject.toml) makes setuptools' editable install put the checkout
on ``sys.path`` instead (a ``.pth`` file), in its default mode.

The venv starts from the dependencies the running test environment holds (hard links,
without this project's install), so pip installs only the project. From a scratch
directory, with no ``PYTHONPATH``, the program runs PySpark's own lookup
(``pyspark.sql.worker.lookup_data_sources``, what the JVM asks a Python worker on the
first data source call) and checks that it answers ``quiver`` from the checkout. What
the JVM does with that answer is the same for every install: the quick start runs
end to end in an editable install (the one ``make venv`` builds) from outside the
checkout in ``integration/test_quickstart.py``.
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
import io
from pyspark.serializers import read_int
from pyspark.sql.worker.lookup_data_sources import _main
import pyspark_quiver
print("pyspark_quiver from", pyspark_quiver.__file__)
out = io.BytesIO()
_main(io.BytesIO(), out)
out.seek(0)
names = []
for _ in range(read_int(out)):
    names.append(out.read(read_int(out)).decode())
    out.read(read_int(out))  # the pickled data source
print("found", sorted(names))
"""


def test_pysparks_lookup_finds_format_quiver_outside_the_checkout_after_pip_install_e(
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
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"pyspark_quiver from {checkout}/pyspark_quiver/__init__.py" in proc.stdout
    assert "found ['quiver']" in proc.stdout, proc.stdout
