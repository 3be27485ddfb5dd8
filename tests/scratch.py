"""Where the scratch stores of ``tests/`` live: in memory when the machine has room.

The engine syncs every WAL append, segment, control object and rename; on a disk an
fsync costs milliseconds and a test store makes thousands, so most of an engine test's
time went into waiting for the disk. What a test checks never depends on the disk
keeping its data through a power cut (crashes and lost syncs are simulated by
``tests/faults.py``, which sees each call before it is made), so the stores of
``tests/`` go on ``/dev/shm`` (a tmpfs), where a sync returns at once: the same calls,
in the same order, with the same results. ``integration/`` keeps the system's temporary
directory: it hard-links installed packages into fresh virtualenvs, which only works
within one filesystem, and runs the product as a user would.

``QUIVER_TEST_TMPDIR`` names another directory; set to the empty string, the system's
temporary directory is used (``tempfile.gettempdir()``).
"""

from __future__ import annotations

import os

MEMORY = "/dev/shm"
ROOM = 2 * 2**30
"""The free space ``/dev/shm`` needs to be chosen (a run of the whole of ``tests/`` holds
up to a few hundred MB there until it ends)."""


def _scratch_dir() -> str | None:
    chosen = os.environ.get("QUIVER_TEST_TMPDIR")
    if chosen is not None:
        return chosen or None
    try:
        fs = os.statvfs(MEMORY)
        if fs.f_bavail * fs.f_frsize < ROOM:
            return None
        mine = os.path.join(MEMORY, f"quiver-tests-{os.getuid()}")
        os.makedirs(mine, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return mine if os.access(mine, os.W_OK | os.X_OK) else None


SCRATCH: str | None = _scratch_dir()
"""The directory the scratch stores of ``tests/`` go under (``tmp_path``, the state
machines' ``tempfile.mkdtemp``): this user's directory on ``/dev/shm``, or None for the
system's temporary directory."""
