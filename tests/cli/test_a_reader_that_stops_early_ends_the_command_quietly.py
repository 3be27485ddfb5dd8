"""A command whose output's reader went away (``quiver status PATH | head``) ends at
once with exit 141 (128 + SIGPIPE) and prints nothing more: no ``BrokenPipeError``, no
"Exception ignored" from the flush at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import write_segments

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("secret", [False, True], ids=["plain", "with a storage secret"])
@pytest.mark.parametrize("args", [["status", "--json"], ["fsck", "--json"], ["status"]])
def test_a_closed_pipe_ends_the_command_with_141_and_nothing_on_stderr(
    tmp_path: Path, args: list[str], secret: bool
) -> None:
    """With a storage secret given (here by -S), the command's output goes through the
    writer that hides it: a closed pipe ends it the same way."""
    root = tmp_path / "s"
    write_segments(root, "p-0", 200, rows=1)  # more output than one pipe buffer
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiver_spark.cli", args[0], str(root), *args[1:]]
        + (["-S", "aws_secret_access_key=not-shown-secret-1"] if secret else []),
        stdout=write,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(write)
    os.close(read)  # the reader is gone before the command writes a byte
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
