"""The ``quiver`` command line (console script ``quiver = quiver_spark.cli:main``).

Commands: ``status``, ``fsck``, ``subscribers`` (``list|add|remove``), ``gc``,
``txns`` (``list|discard``), ``config`` (``show|set|repair``) and ``metrics``; each prints a human table by default and a JSON
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
from typing import Any

import click

from .. import __version__
from .common import EXIT_TROUBLE, CliError, configure_logging, one_line
from .config import config
from .fsck import fsck
from .gc import gc
from .metrics import metrics
from .status import status
from .subscribers import subscribers
from .txns import txns

__all__ = ["cli", "main"]

log = logging.getLogger(__name__)


class QuiverGroup(click.Group):
    """The command group; an error no command turned into a message is one line too.

    A command's own errors are :class:`~.common.CliError` lines. Anything else (a
    filesystem backend failing half-way, a bug) becomes ``Error: <type>: <message>``
    with exit 1, and its traceback goes to the debug log (``-vv``), never to a user
    who did not ask for it.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            log.debug("quiver.cli.unexpected", exc_info=True)
            raise CliError(
                f"{type(e).__name__}: {one_line(e)} (run with -vv for the traceback)",
                EXIT_TROUBLE,
            ) from e


@click.group(cls=QuiverGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quiver")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log quiver's own events to stderr (-v info, -vv debug); also after the command.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Inspect and maintain a Quiver store: a durable Arrow buffer for Spark streams.

    Every command takes the store's PATH (a local directory or file:// URL) and has
    its own help: quiver COMMAND --help.
    """
    ctx.meta["quiver.verbose"] = ctx.meta.get("quiver.verbose", 0) + verbose
    configure_logging(ctx.meta["quiver.verbose"])


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
