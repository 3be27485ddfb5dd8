"""The ``quiver`` command line (console script ``quiver = quiver_spark.cli:main``).

Commands: ``status``, ``fsck``, ``subscribers`` (``list|add|remove``), ``gc``,
``txns`` (``list|discard``), ``config`` (``show|set|repair``) and ``metrics``; each prints a human table by default and a JSON
document with ``--json`` (schemas in each command's module: :mod:`.status`,
:mod:`.fsck`, :mod:`.subscribers`, :mod:`.gc`, :mod:`.txns`, :mod:`.config`; every document carries ``"schema": "quiver.<command>/<version>"``).

Exit codes: 0 success; 1 the command found trouble (an unhealthy store in ``fsck``,
a corrupt file met by ``status``, a lock held elsewhere, an unknown or duplicate
subscriber); 2 usage errors (bad flags or option values, a missing or non-Quiver
path); 130 interrupted (Ctrl-C), with one line and no traceback, also while the
command is still importing its modules and while it waits in a request to an object
store that does not answer (:mod:`.interrupt`: it ends within half a second); 141,
silently, when the reader of its output went away (``quiver status PATH | head``)
(this module imports nothing heavy; the commands live in :mod:`.app`). Also runnable
as ``python -m quiver_spark.cli``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["cli", "main"]

from .exits import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``quiver`` console script."""
    from .interrupt import install, say_interrupted

    install()  # Ctrl-C ends the command at once, even in a native call (see .interrupt)
    try:
        from .app import cli as group

        group.main(args=list(argv) if argv is not None else None, prog_name="quiver")
    except KeyboardInterrupt:  # while importing: the group handles it once running
        say_interrupted("\n")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # whoever read the output stopped early (`quiver status PATH | head`): say
        # nothing, and let no flush at exit complain about the closed pipe again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)


def __getattr__(name: str) -> Any:
    if name == "cli":
        from .app import cli as group

        return group
    raise AttributeError(name)
