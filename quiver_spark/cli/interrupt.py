"""Ctrl-C ends a ``quiver`` command at once: exit 130 and one line, ``Interrupted.``,
even while the command waits in a native call that does not return to Python.

Python runs its SIGINT handler (the ``KeyboardInterrupt``) in the main thread only,
between two bytecodes. A command blocked in obstore's request to an object store that
accepts the connection and never answers does not get back to Python until the
request's retry budget ran out (``storage.retry_timeout``, 60 s), so the interrupt
waited that long. The C-level handler still runs at once, and it writes the signal's
number to the wakeup fd (:func:`signal.set_wakeup_fd`): a watcher thread reading it
sees Ctrl-C whatever the main thread is doing. It gives the main thread
:data:`GRACE_S` to end the usual way (its ``KeyboardInterrupt``: ``finally`` blocks
close the store, :class:`~.app.QuiverGroup` prints the line, exit 130), then prints the
line itself unless it was printed, and ends the process with ``os._exit(130)``.

The command stays in the main thread, so everything it does on Ctrl-C when it can
(``metrics --serve`` closing its server, a closed pipe's exit 141) is unchanged.

What an exit mid-command leaves: the same as kill -9 at that point, and every write
of the engine is safe against that (ARCHITECTURE.md §9, §13.6, §2.3; the tests kill
processes mid-write): a control object (STORE, POLICY, a ``.sub`` record, a commit
record) is written whole or not at all, a torn tail of a WAL or of the ack log is
cut by its next opener, and a request in flight may land after the exit or never
(its outcome is unknown, as after any lost answer, and the next reader resolves it).
Per command:

- ``subscribers add --create``: a store is created by one object, STORE, written
  after POLICY and POLICY.copy (ARCHITECTURE.md §7.1): the root is either no store,
  and the same command run again makes it, or a whole store.
- ``subscribers add``/``remove``: the ack log's registration or deregistration is
  one record, there or not; the ``.sub`` record follows it. An ``add`` stopped
  between the two leaves the name registered (``add`` again says so) without its
  record, which the next retention pass writes (ARCHITECTURE.md §2.3).
- ``config set``/``repair``: POLICY is replaced whole, then POLICY.copy (a copy left
  a generation behind is what ``quiver fsck`` names and ``quiver config repair``
  rewrites).
- ``gc``: each finalize and each deletion is one of the engine's crash-safe steps; a
  held partition lock or lease is released by the exit (flock) or expires (LEASE).
- ``txns discard``: each decision is one commit record, created whole or not at all.
- ``fsck --quarantine``: each move aside is §5.4's quarantine, safe at every step.
- read-only commands (``status``, ``fsck``, ``metrics``, ``subscribers list``,
  ``txns list``, ``config show``): nothing is written but advisory files
  (``metrics --prune-stale`` removes some, one at a time).

The watcher is installed only by the console script's :func:`~quiver_spark.cli.main`,
in the main thread, and only when SIGINT has Python's default handler (a shell that
started the command in the background with SIGINT ignored keeps it ignored).
In-process runs (click's ``CliRunner``) see the usual ``KeyboardInterrupt`` alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .exits import EXIT_INTERRUPTED

__all__ = ["GRACE_S", "install", "say_interrupted"]

GRACE_S = 0.5
"""How long after Ctrl-C the command may take to end on its own before the process
exits anyway (the usual way takes a few milliseconds when the main thread is in
Python)."""
FLUSH_WAIT_S = 0.2
"""How long the exit waits for stdout's buffered output (a main thread blocked in a
write holds its lock)."""
LINE = "Interrupted."

_lock = threading.Lock()
_said_by_command = False
_said_by_watcher = False
_installed = False


def say_interrupted(lead: str = "") -> None:
    """Print ``Interrupted.`` (after ``lead``) on stderr for the command's own
    ``KeyboardInterrupt``, unless the watcher did (the process is ending then)."""
    global _said_by_command
    with _lock:
        if _said_by_watcher:
            return
        _said_by_command = True
        sys.stderr.write(f"{lead}{LINE}\n")
        sys.stderr.flush()


def install() -> None:
    """Start the watcher (once per process, from the main thread; see the module)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # ignored (a background job) or someone else's: left as it is
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:
        os.close(read)
        os.close(write)
        return
    _installed = True
    threading.Thread(target=_watch, args=(read,), name="quiver-interrupt", daemon=True).start()


def _watch(fd: int) -> None:
    while True:
        try:
            got = os.read(fd, 64)
        except OSError:
            return
        if not got:
            return
        if signal.SIGINT in got:
            break
    time.sleep(GRACE_S)
    _exit()


def _exit() -> None:
    """Print the line unless the command did, flush what can be, exit 130 now."""
    global _said_by_watcher
    # the command may be printing the line itself: wait for it, not for a stuck stderr
    locked = _lock.acquire(timeout=FLUSH_WAIT_S)
    say = locked and not _said_by_command
    _said_by_watcher = True
    _flush(sys.stdout)
    if say:
        _flush(sys.stderr)
        try:
            os.write(2, f"{LINE}\n".encode())
        except OSError:
            pass
    os._exit(EXIT_INTERRUPTED)


def _flush(stream: object) -> None:
    """Flush ``stream`` unless that takes longer than :data:`FLUSH_WAIT_S` (or fails:
    a reader that went away)."""

    def flush() -> None:
        try:
            stream.flush()  # type: ignore[attr-defined]
        except (OSError, ValueError, AttributeError):
            pass

    t = threading.Thread(target=flush, daemon=True)
    t.start()
    t.join(FLUSH_WAIT_S)
