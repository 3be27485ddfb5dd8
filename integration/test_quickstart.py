"""The README's Quick start runs as written, from outside the checkout.

The README shows ``examples/quickstart.py`` whole (checked here to be the same text),
and that file is run as a user runs it: ``python quickstart.py`` from a scratch
directory, with no ``PYTHONPATH``, no ``PYSPARK_PYTHON`` and no registration call,
once with the built wheel installed into a fresh virtualenv and once in the
environment ``make venv`` builds (an editable install, which PySpark's module listing
must still find). It leaves the store the README's shell walkthrough starts from:
every segment kept for a subscriber that has read nothing yet. The latter starts from the dependencies the running test environment
already holds (hard links of its site-packages, without this project's own install),
so that ``make venv`` resolves them as installed and installs only the project: what
is measured is the Makefile and the editable install, not the download of every
dependency, which building the test environment itself already did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from integration.harness import (
    REPO,
    FreshVenv,
    _base_python,
    copy_checkout,
    link_dependencies,
    run,
)

QUICKSTART = REPO / "examples" / "quickstart.py"
BLOCK = re.compile(
    r"<!-- quickstart: examples/quickstart.py -->\n```python\n(.*?)```\n<!-- /quickstart -->",
    re.S,
)


def readme_quickstart() -> str:
    found = BLOCK.findall((REPO / "README.md").read_text())
    assert len(found) == 1, "README.md must show examples/quickstart.py once, between markers"
    return str(found[0])


def test_the_readme_shows_the_quickstart_file_verbatim() -> None:
    assert readme_quickstart() == QUICKSTART.read_text()


def run_quickstart(venv: FreshVenv, workdir: Path) -> str:
    """``python quickstart.py`` as a user types it, in ``workdir``; returns its stdout."""
    script = workdir / "quickstart.py"
    script.write_text(readme_quickstart())
    env = venv.env()
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"):
        env.pop(name)
    proc = subprocess.run([str(venv.python), script.name], capture_output=True, text=True,
                          timeout=400, cwd=workdir, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc.stdout


def test_the_quickstart_runs_with_the_installed_wheel(fresh_venv: FreshVenv) -> None:
    workdir = fresh_venv.scratch / "quickstart-wheel"
    workdir.mkdir()
    out = run_quickstart(fresh_venv, workdir)
    printed = re.search(r"^exported 1010 rows from (/\S+/quiver)$", out, re.M)
    assert printed, out
    # what the README's shell walkthrough starts from: every segment kept for the
    # subscriber that has read nothing yet
    doc = json.loads(fresh_venv.quiver("status", printed.group(1), "--json"))
    assert sum(p["rows"] for p in doc["partitions"]) == 1010
    lag = {s["name"]: s["lag_segments"] for s in doc["subscribers"]}
    assert lag["warehouse_loader"] == doc["totals"]["segments"] > 0, lag


def test_the_quickstart_runs_in_the_environment_make_builds(integration_root: Path) -> None:
    base = integration_root / "make-venv"
    checkout = copy_checkout(base / "checkout")  # what a user clones
    scratch = base / "scratch"
    scratch.mkdir()
    venv = FreshVenv(base / "venv", scratch)
    run([_base_python(), "-m", "venv", "--without-pip", str(venv.root)], cwd=scratch)
    link_dependencies(venv.site_packages)  # make venv installs only the project
    env = venv.env()
    env.pop("VIRTUAL_ENV")
    run(["make", "venv", f"VENV={venv.root}"], cwd=checkout, env=env, timeout=900)
    out = run_quickstart(venv, scratch)
    assert re.search(r"^exported 1010 rows from /\S+/quiver$", out, re.M), out
    assert os.path.exists(venv.root / ".installed")
