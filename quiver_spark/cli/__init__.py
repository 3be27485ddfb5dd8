"""The ``quiver`` command line (console script ``quiver = quiver_spark.cli:main``).

Commands: ``status``, ``fsck``, ``subscribers`` (``list|add|remove``), ``gc``,
``txns`` (``list|discard``), ``config`` (``show|set``) and ``metrics``; each prints a human table by default and a JSON
document with ``--json`` (schemas in each command's module: :mod:`.status`,
:mod:`.fsck`, :mod:`.subscribers`, :mod:`.gc`, :mod:`.txns`, :mod:`.config`; every document carries ``"schema": "quiver.<command>/<version>"``).

Exit codes: 0 success; 1 the command found trouble (an unhealthy store in ``fsck``,
a corrupt file met by ``status``, a lock held elsewhere, an unknown or duplicate
subscriber); 2 usage errors (bad flags or option values, a missing or non-Quiver
path). Also runnable as ``python -m quiver_spark.cli``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import click

from .. import __version__
from .config import config
from .fsck import fsck
from .gc import gc
from .metrics import metrics
from .status import status
from .subscribers import subscribers
from .txns import txns

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quiver")
@click.option(
    "-v", "--verbose", count=True, help="Log quiver's own events to stderr (-v info, -vv debug)."
)
def cli(verbose: int) -> None:
    """Inspect and maintain a Quiver store: a durable Arrow buffer for Spark streams."""
    level = {0: logging.ERROR, 1: logging.INFO}.get(verbose, logging.DEBUG)
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("quiver_spark")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


cli.add_command(status)
cli.add_command(fsck)
cli.add_command(subscribers)
cli.add_command(gc)
cli.add_command(txns)
cli.add_command(config)
cli.add_command(metrics)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``quiver`` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="quiver")
