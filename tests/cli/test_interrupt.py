"""Ctrl-C stops any ``quiver`` command with exit 130 and one line, never a traceback.

130 (128 + SIGINT) is the shell's convention; 1 would read as "store unhealthy" to a
cron job running ``quiver fsck``. It holds while the command works and while it is
still importing its modules.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from .conftest import write_segments

REPO = Path(__file__).resolve().parents[2]

# fsck, stopped while it verifies: the checker announces itself and waits for the signal.
FSCK_WAITING = """
import sys, threading
import quiver_spark.fsck as checker
original = checker.StoreChecker.run
def run(self, *a, **kw):
    print("verifying", flush=True)
    threading.Event().wait(60)
    return original(self, *a, **kw)
checker.StoreChecker.run = run
from quiver_spark.cli import main
main(["fsck", sys.argv[1]])
"""

# Ctrl-C while the command is importing its modules (pyarrow, the slowest).
INTERRUPTED_IMPORT = """
import sys
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupting())
from quiver_spark.cli import main
main(["status", sys.argv[1]])
"""


def _run(script: str, root: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root.parent,
    )  # fmt: skip


def test_ctrl_c_during_fsck_exits_130_without_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 2)
    proc = _run(FSCK_WAITING, root)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "verifying\n"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "Interrupted.", err


def test_ctrl_c_while_the_command_starts_exits_130_without_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_segments(root, "p-0", 1)
    proc = _run(INTERRUPTED_IMPORT, root)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip() == "Interrupted.", err
