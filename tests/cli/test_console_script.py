"""The installed ``quiver`` console script and ``python -m quiver_spark.cli``, as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import BIN, Built, flip_byte

QUIVER = BIN / "quiver"


def test_the_console_script_reports_status_as_json(built: Built) -> None:
    assert QUIVER.exists(), f"{QUIVER} missing: install the package (pip install -e .)"
    out = subprocess.run([QUIVER, "status", built.root, "--json"], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [p["segments"] for p in doc["partitions"]] == [3, 3]
    assert sorted(s["name"] for s in doc["subscribers"]) == ["fast", "slow"]


def test_the_console_script_exit_codes_tell_a_healthy_from_a_damaged_store(built: Built) -> None:
    ok = subprocess.run([QUIVER, "fsck", built.root], capture_output=True, text=True,
                        timeout=60, check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stderr == ""  # no progress bar when stderr is not a terminal
    seg = built.root / "segments" / "p-0" / f"{2:020d}.arrow"
    flip_byte(seg, 64)
    bad = subprocess.run([QUIVER, "fsck", built.root], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 1 and str(seg) in bad.stdout
    missing = subprocess.run([QUIVER, "status", built.root / "nope"], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_python_dash_m_runs_the_same_command_line(built: Built) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-m", "quiver_spark.cli", "subscribers", built.root,
                          "list", "--json"], capture_output=True, text=True, timeout=60,
                         check=False, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [s["name"] for s in json.loads(out.stdout)["subscribers"]] == ["fast", "slow"]
    version = subprocess.run([sys.executable, "-m", "quiver_spark.cli", "--version"],
                             capture_output=True, text=True, timeout=60, check=False,
                             env=env)  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("quiver, version ")
