"""How a Quiver error reaches a Spark user: as its own line, not a worker traceback.

PySpark formats an exception raised in a Python worker with
``pyspark.util.handle_worker_exception``: the whole traceback, unless the worker's
environment has ``SPARK_HIDE_TRACEBACK`` set (what
``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` does for UDF workers), in
which case only ``module.Class: message``. Spark then prefixes its error class, so a
traceback puts our message dozens of lines below the first.

:func:`one_line` marks the entry points Spark calls (the data source's methods, the
sink's and the source's). When one of them raises a :class:`QuiverError` (an error
written for the user: bad option, wrong path, lost data, a storage still failing when
the retry budget ran out, :class:`~quiver_spark.errors.RetriesExhausted`,
ARCHITECTURE.md §2.2) inside a PySpark worker, it sets ``SPARK_HIDE_TRACEBACK`` in that
worker's environment just before the exception leaves. Every PySpark 4.3 worker that
runs a data source (planning workers, the stream source runner, the streaming sink's
commit runner, executor workers) exits after reporting an exception, so the setting dies
with the process and never reaches a user's own UDF errors. Any other exception (a bug,
an unexpected ``OSError``) keeps its traceback.
``tests/spark/test_first_contact_errors.py`` checks both.

Every call of a :func:`one_line` entry point in a PySpark worker also makes sure, once
per process, that Quiver's log lines there carry a time and a level
(:func:`quiver_spark.logs.configure_worker_logging`, ``QUIVER_LOG_LEVEL``).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from ..errors import QuiverError
from ..logs import configure_worker_logging

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"

USER_ERRORS = (QuiverError,)
"""The exceptions whose message is written for the user: reported without a traceback."""

F = TypeVar("F", bound=Callable[..., Any])


def in_pyspark_worker() -> bool:
    """Whether this process is a PySpark worker (its main module is one of PySpark's)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return str(getattr(spec, "name", "") or "").startswith("pyspark.")


def worker_logging() -> None:
    """In a PySpark worker, Quiver's logging set up (once per process; cheap after)."""
    if in_pyspark_worker():
        configure_worker_logging()


def _mark(e: BaseException) -> None:
    if isinstance(e, USER_ERRORS) and in_pyspark_worker():
        os.environ[HIDE_TRACEBACK] = "1"


def one_line(func: F) -> F:
    """``func`` (a function or a generator function) reporting a :data:`USER_ERRORS` on one line."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
            worker_logging()
            try:
                return (yield from func(*args, **kwargs))
            except USER_ERRORS as e:
                _mark(e)
                raise

        return cast(F, gen)

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        worker_logging()
        try:
            out = func(*args, **kwargs)
        except USER_ERRORS as e:
            _mark(e)
            raise
        return _guard(out) if inspect.isgenerator(out) else out  # read() returns one

    return cast(F, call)


def _guard(it: Iterator[Any]) -> Iterator[Any]:
    try:
        return (yield from it)
    except USER_ERRORS as e:
        _mark(e)
        raise


def guarded(cls: type, methods: tuple[str, ...], module: str) -> type:
    """A subclass of ``cls`` named like it, whose ``methods`` are :func:`one_line`.

    Bind it at module level of ``module`` under ``cls.__name__`` so pickling finds it.
    """
    attrs: dict[str, Any] = {"__module__": module, "__doc__": cls.__doc__}
    for name in methods:
        if hasattr(cls, name):
            attrs[name] = one_line(getattr(cls, name))
    return type(cls.__name__, (cls,), attrs)
