"""The ``quiver`` command group and its commands (see :mod:`quiver_spark.cli`)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from .. import __version__
from ..errors import CliError
from .common import configure_logging, one_line
from .config import config
from .exits import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_TROUBLE
from .fsck import fsck
from .gc import gc
from .interrupt import say_interrupted
from .metrics import metrics
from .status import status
from .subscribers import subscribers
from .txns import txns

__all__ = ["cli"]

log = logging.getLogger(__name__)


class QuiverGroup(click.Group):
    """The command group; an error no command turned into a message is one line too.

    A command's own errors are :class:`~quiver_spark.errors.CliError` lines. Anything else (a
    filesystem backend failing half-way, a bug) becomes ``Error: <type>: <message>``
    with exit 1, and its traceback goes to the debug log (``-vv``), never to a user
    who did not ask for it. Ctrl-C exits 130 with one line, never 1 (which ``fsck``
    uses for an unhealthy store); a command that cannot get back to Python to see it
    (a request that is not answered) is ended by :mod:`.interrupt`.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as e:  # click prints it as `Error: <message>` and exits with its code
            shown = click.ClickException(e.message)
            shown.exit_code = e.exit_code  # type: ignore[misc]  # per-instance code
            raise shown from e
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:  # the reader went away (`quiver ... | head`): not an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no flush at exit complains again
            raise click.exceptions.Exit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:  # not an unhealthy store (exit 1): the shell's 130
            say_interrupted()  # once: the watcher of .interrupt may be ending the process
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:
            log.debug("quiver.cli.unexpected", exc_info=True)
            shown = click.ClickException(  # a CliError raised here would escape as a traceback
                f"{type(e).__name__}: {one_line(e)} (run with -vv for the traceback)"
            )
            shown.exit_code = EXIT_TROUBLE  # type: ignore[misc]  # per-instance code
            raise shown from e


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

    Every command takes the store's PATH (a local directory, file:// URL, or an
    object-store URL such as s3://bucket/store with -S KEY=VALUE client settings)
    and has its own help: quiver COMMAND --help.
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
