"""What every ``quiver`` command shares: store arguments, opening, errors, output.

Exit codes: 0 success, 1 the command ran and found trouble (an unhealthy store in
``fsck``, a corrupt file met by ``status``, a partition lock held by another
process), 2 usage errors (a bad flag or option value, a missing or non-Quiver path).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import click

from ..config import NAME_RE, StoreConfig
from ..errors import (
    CliError,
    ConfigError,
    CorruptionError,
    QuiverError,
    StorageConfigError,
    StoreNotFoundError,
    UnknownOptionError,
)
from ..logs import FORMAT as LOG_FORMAT
from ..logs import LOGGER, announce, level_from_env
from ..objects import StorageOptions
from ..options import (
    STORE_OPTIONS,
    canonical_option,
    did_you_mean,
    merged_options,
    overlay,
    store_config_from_options,
)
from ..policy import damage_warning
from ..root_kind import root_kind
from ..store import QuiverStore
from ..urls import check_url, root_location
from .exits import EXIT_TROUBLE, EXIT_USAGE

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@dataclass
class StoreArgs:
    """The store-locating arguments common to every command."""

    path: str
    options: tuple[str, ...] = ()
    config_file: str | None = None
    segments_path: str | None = None
    wal_path: str | None = None
    as_json: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    storage: tuple[str, ...] = ()

    @property
    def root(self) -> str:
        """PATH as an absolute local directory (a ``file://`` URL is accepted) or an
        object-store URL (``s3://bucket/prefix``)."""
        return store_root(self.path)

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """Every setting of the command: ``--option``, ``--storage-option`` and the path
        flags over the store profile (``--config``, else ``QUIVER_CONFIG``), in the
        precedence :func:`~quiver_spark.options.merged_options` states."""
        flags = {f"storage.{k.removeprefix('storage.')}": v for k, v in self._storage_flags()}
        try:
            explicit = overlay(parse_option_flags(self.options), flags)
            paths = {"segment.path": self.segments_path, "wal.path": self.wal_path}
            explicit = overlay(explicit, {k: v for k, v in paths.items() if v})
            if self.config_file is not None:
                explicit["config"] = self.config_file
            return merged_options(explicit, config_name="--config")
        except ConfigError as e:
            raise CliError(str(e)) from e

    @property
    def storage_options(self) -> dict[str, str]:
        """The object store client's settings: ``--storage-option KEY=VALUE`` flags over
        the store profile's ``storage:`` section (values never printed)."""
        prefix = "storage."
        return {
            k[len(prefix) :].lower(): str(v)
            for k, v in self.settings.items()
            if str(k).lower().startswith(prefix) and len(k) > len(prefix)
        }

    def _storage_flags(self) -> list[tuple[str, str]]:
        """``--storage-option KEY=VALUE`` flags as ``(key, value)`` (key lower-cased)."""
        out: list[tuple[str, str]] = []
        for flag in self.storage:
            key, sep, value = flag.partition("=")
            if not sep or not key.strip():
                shown = key.strip() if sep else "<no '='>"
                raise CliError(
                    f"--storage-option expects KEY=VALUE (an object store client setting "
                    f"such as aws_endpoint=http://host:9000); got {shown}"
                )
            out.append((key.strip().lower(), value.strip()))
        return out


def store_root(path: str) -> str:
    """A store root from the command line: a local directory, a ``file://`` URL or an
    object-store URL; anything else is a usage error."""
    try:
        return root_location("PATH", path)
    except ConfigError as e:
        raise CliError(f"{e.value} is not a store root: a store's root is {e.allowed}") from None


def configure_logging(verbose: int) -> None:
    """Log quiver's own events to stderr: ``-v`` info, ``-vv`` debug; without ``-v`` the
    level ``QUIVER_LOG_LEVEL`` names (:mod:`quiver_spark.logs`), else errors only."""
    complaint = None
    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    else:
        level, complaint = level_from_env(logging.ERROR)
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(_ScrubbingFormatter(LOG_FORMAT))
    root = logging.getLogger(LOGGER)
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    if complaint is not None:
        announce(handler, complaint)


def _verbose_callback(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value:  # after the command name: adds to a -v given before it
        meta = ctx.find_root().meta
        meta["quiver.verbose"] = meta.get("quiver.verbose", 0) + value
        configure_logging(meta["quiver.verbose"])


verbose_option = click.option(
    "-v",
    "--verbose",
    count=True,
    expose_value=False,
    callback=_verbose_callback,
    help="Log quiver's own events to stderr (-v info, -vv debug).",
)
"""``-v`` accepted after the command name too (``quiver status PATH -v``)."""


def store_arguments(func: F) -> F:
    """Decorate a command with PATH, ``--option``, ``--config``, paths and ``--json``.

    The command receives one ``args: StoreArgs`` keyword argument instead.
    """
    decorators = [
        click.argument("path", type=click.Path(file_okay=True, dir_okay=True)),
        click.option(
            "-o",
            "--option",
            "options",
            multiple=True,
            metavar="KEY=VALUE",
            help="A store option as the sink takes it (repeatable), e.g. retention.size_cap=10GB.",
        ),
        click.option(
            "--config",
            "config_file",
            metavar="FILE",
            help="A store profile in the layout of conf/quiver.yaml: store options and a "
            "storage: section (default: the file $QUIVER_CONFIG names); --option, "
            "--storage-option and the path flags win over it.",
        ),
        click.option(
            "--segments-path",
            metavar="URL",
            help="Where finalized segments live when not in the store (segment.path).",
        ),
        click.option(
            "--wal-path",
            metavar="DIR",
            help="Where the partitions' WAL lives when not in the store (wal.path).",
        ),
        click.option(
            "-S",
            "--storage-option",
            "storage",
            multiple=True,
            metavar="KEY=VALUE",
            help="An object store client setting for an s3://, gs:// or az:// PATH "
            "(repeatable), e.g. aws_endpoint=http://host:9000 (or storage.aws_endpoint=..., "
            "as Spark and error messages spell it); never printed.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout."),
        verbose_option,
    ]

    def wrapper(
        path: str,
        options: tuple[str, ...],
        config_file: str | None,
        segments_path: str | None,
        wal_path: str | None,
        storage: tuple[str, ...],
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        args = StoreArgs(
            path, options, config_file, segments_path, wal_path, as_json, storage=storage
        )
        with hiding_secrets(args.storage_options):
            return func(args=args, **kwargs)

    functools.update_wrapper(wrapper, func)  # keeps __click_params__ of inner decorators
    delattr(wrapper, "__wrapped__")
    out: Any = wrapper
    for deco in reversed(decorators):
        out = deco(out)
    return cast(F, out)


# -- secrets --------------------------------------------------------------------------
_hidden: list[StorageOptions] = []  # the options of the command running (one at a time)


class _Scrubbing:
    """A text stream that writes through ``inner`` with every secret value replaced."""

    def __init__(self, inner: Any, options: StorageOptions) -> None:
        self._inner = inner
        self._options = options

    def write(self, text: str) -> int:
        self._inner.write(self._options.scrub(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def hiding_secrets(storage_options: Mapping[str, str]) -> Iterator[None]:
    """Run a command so that no value of a secret ``--storage-option`` (nor an access
    key id) reaches stdout, stderr, a log line or an error message: text written to
    the streams is scrubbed, and an error leaving the command is rewritten as one
    scrubbed line (what :class:`~.app.QuiverGroup` would print)."""
    options = StorageOptions(storage_options)
    if not options.secrets():
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Scrubbing(out, options), _Scrubbing(err, options)
    _hidden.append(options)
    try:
        yield
    except (CliError, click.ClickException) as e:
        shown = options.scrub(e.message)
        if shown != e.message:
            raise CliError(shown, e.exit_code) from None
        raise
    except (click.exceptions.Exit, click.Abort, KeyboardInterrupt, SystemExit, BrokenPipeError):
        raise  # QuiverGroup's: a closed pipe is exit 141, in silence
    except Exception as e:
        logging.getLogger(__name__).debug("quiver.cli.unexpected", exc_info=True)
        raise CliError(
            options.scrub(f"{type(e).__name__}: {one_line(e)} (run with -vv for the traceback)"),
            EXIT_TROUBLE,
        ) from None
    finally:
        _hidden.remove(options)
        sys.stdout, sys.stderr = out, err


class _ScrubbingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        for options in _hidden:
            text = options.scrub(text)
        return text


# -- options and opening ------------------------------------------------------------
def parse_option_flags(flags: Sequence[str]) -> dict[str, str]:
    """``("retention.size_cap=1GB",)`` -> ``{"retention.size_cap": "1GB"}``.

    Raises
    ------
    ConfigError
        A flag without ``=`` (naming ``--option``), or an :class:`UnknownOptionError`
        naming the unknown key, its value and the near miss.
    """
    out: dict[str, str] = {}
    for flag in flags:
        key, sep, value = flag.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--option", flag, "KEY=VALUE, e.g. retention.size_cap=10GB")
        if canonical_option(key) is None:
            hint = did_you_mean(key.strip(), STORE_OPTIONS)
            raise UnknownOptionError(
                key.strip(),
                value.strip(),
                f"a store option{hint}: " + ", ".join(sorted(STORE_OPTIONS)),
            )
        out[key.strip()] = value.strip()
    return out


def store_config(args: StoreArgs) -> StoreConfig:
    """The validated config from the store profile, ``--option`` and the path flags
    (:attr:`StoreArgs.settings`)."""
    try:
        config = store_config_from_options(args.settings)
        if config.segment.path:  # a missing backend or a bad URL, before anything is opened
            check_url("segment.path", config.segment.path)
        return config
    except ConfigError as e:
        raise CliError(str(e)) from e


def check_store_path(path: str) -> str:
    """The absolute root if ``path`` is an existing Quiver store; CliError (exit 2) otherwise.
    An object-store root is checked by opening it (its STORE object must exist)."""
    root = store_root(path)
    try:
        root_kind(root).check_existing_root(root, path)
    except StoreNotFoundError as e:
        raise CliError(str(e)) from None
    return root


def open_store(args: StoreArgs, config: StoreConfig | None = None) -> QuiverStore:
    """A read/maintain handle on the store; nothing on disk is created or changed."""
    config = config if config is not None else store_config(args)
    root = check_store_path(args.path)
    try:
        store = QuiverStore.open(
            root,
            config,
            partition=None,
            create=False,
            background=False,
            storage_options=args.storage_options or None,
        )
    except ConfigError as e:
        raise open_error(args, config, e) from e
    except CorruptionError as e:
        raise CliError(f"{e}; run `quiver fsck {args.path}`", EXIT_TROUBLE) from e
    except StoreNotFoundError as e:  # an object root without its STORE object
        raise CliError(str(e), EXIT_USAGE) from e
    except StorageConfigError as e:
        raise storage_error(e) from e
    except QuiverError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    check_segments_reachable(store, args.path)
    damaged = store.policy.damaged
    if damaged is not None:  # named by every command, never a failure (ARCHITECTURE.md §7.2)
        click.echo(f"warning: {damage_warning(store.root, damaged)}", err=True)
    return store


def storage_error(e: StorageConfigError) -> CliError:
    """An object root configured wrong, as a command reports it: its one line naming
    what to set, exit 2 (a usage mistake), or 1 when nothing answered at the endpoint
    (the storage may be down rather than misconfigured)."""
    return CliError(str(e), EXIT_TROUBLE if e.retryable else EXIT_USAGE)


def open_error(args: StoreArgs, config: StoreConfig, e: ConfigError) -> CliError:
    """The CLI error for a ConfigError raised while opening a store."""
    if e.option == "segment.path" and not config.segment.path:  # the recorded location
        return CliError(
            f"store {args.path} keeps its segments at {e.value}, which cannot be used "
            f"here: {e.allowed}",
            EXIT_TROUBLE,
        )
    if e.option == "segment.path" and args.segments_path:  # name the flag the user typed
        return CliError(f"--segments-path {args.segments_path} contradicts {e.allowed}")
    return CliError(str(e), EXIT_USAGE)  # an option contradicting the store's policy


def check_segments_reachable(store: QuiverStore, path: str) -> None:
    """One listing of the segments location; failing it is one line, exit 1 (the handle
    is closed). Credentials, endpoint or network trouble show up here, not as a
    traceback half-way through a command."""
    try:
        store.segment_location.partitions()
    except Exception as e:
        store.close()
        misconfigured = isinstance(e, StorageConfigError) and not e.retryable
        raise CliError(
            f"store {path} keeps its segments at {store.segments_url}, which cannot be "
            f"reached: {type(e).__name__}: {one_line(e)}",
            EXIT_USAGE if misconfigured else EXIT_TROUBLE,
        ) from e


def one_line(e: BaseException) -> str:
    """An exception's message on one line (remote filesystems raise multi-line ones)."""
    text = " ".join(str(e).split())
    return text[:500] + ("..." if len(text) > 500 else "")


def with_store(args: StoreArgs, fn: Callable[[QuiverStore], T]) -> T:
    """``fn`` run on a read/maintain handle that is closed after; store errors exit 2."""
    store = open_store(args)
    try:
        return fn(store)
    except CliError:  # the command's own report
        raise
    except CorruptionError as e:
        raise CliError(f"{e}; run `quiver fsck {args.path}`", EXIT_TROUBLE) from e
    except StorageConfigError as e:
        raise storage_error(e) from e
    except QuiverError as e:
        raise CliError(str(e), EXIT_TROUBLE) from e
    finally:
        store.close()


def writer_holder(store: QuiverStore, pid: str) -> str | None:
    """Who holds partition ``pid`` for writing, or None when nobody does: on an object
    root its lease ``partitions/<pid>/LEASE`` (a holder on any machine), on a POSIX
    root its ``flock`` (the LOCK file's JSON names the holder)."""
    return store.kind.writer_holder(store.wal_root, pid)


def local_wal_note(store: QuiverStore) -> str | None:
    """On an object root, the line saying what a command cannot see from here: each
    writer's WAL, STATE and heartbeat are on the disk of the machine that writes."""
    return store.kind.wal_note(store.wal_root)


def wal_partitions(store: QuiverStore) -> list[str]:
    """Partition directories under the WAL root (valid partition names only), sorted."""
    root = store.wal_root
    return [
        p
        for p in store.io.listdir(root)
        if NAME_RE.fullmatch(p) and p not in (".", "..") and os.path.isdir(os.path.join(root, p))
    ]


# -- output ---------------------------------------------------------------------------
def emit_json(doc: Mapping[str, Any]) -> None:
    """Write one JSON document (sorted keys, indented) to stdout."""
    click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``1.5KB`` (1024-based, the units options accept)."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{int(size)}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"  # pragma: no cover - loop always returns


def human_seconds(s: float | None) -> str:
    """``75.2`` -> ``1m15s``; None -> ``-``."""
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    return f"{h // 24}d{h % 24:02d}h"


def human_time(ns: int | None, now_ns: int) -> str:
    """An epoch-ns instant as local ``YYYY-MM-DD HH:MM:SS (age ago)``."""
    if ns is None:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))
    return f"{stamp} ({human_seconds(max(0.0, (now_ns - ns) / 1e9))} ago)"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table; numbers are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(_looks_numeric(row[i]) for row in cells) and bool(cells) for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        parts = [
            c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(row)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _looks_numeric(s: str) -> bool:
    return bool(s) and (s[0].isdigit() or s == "-") and " " not in s


def stderr_is_tty() -> bool:
    """Whether stderr is an interactive terminal (progress bars go only there)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
