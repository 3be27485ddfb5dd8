"""The package imported from an archive on ``sys.path`` (``spark-submit --py-files``).

``--py-files quiver_spark-*.whl`` puts the wheel on the driver's ``sys.path`` only:
Spark adds a ``--py-files`` entry to its Python workers' path only when it ends in
``.zip``, ``.egg`` or ``.jar``, and PySpark's lookup of ``format("quiver")`` lists the
installed modules, not the archives on a path, so ``format("quiver")`` fails with
``DATA_SOURCE_NOT_FOUND`` before any code of this package runs. Once the application
calls :func:`quiver_spark.register`, :func:`ship_to_workers` makes the package reach
the workers (a wheel of pure Python is a zip: a copy named ``.zip`` is added as Spark
adds a zip), or says in one line why it cannot: an archive carries no dependencies, and
pyarrow and others are native code, so where they are not installed the way is
``--archives`` (docs/cluster.md, section 1).
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from typing import Any

from ..errors import MissingDependencyError

SHIPPED_AS = (".zip", ".egg", ".jar")
"""What Spark puts on its Python workers' path (``SparkContext.PACKAGE_EXTENSIONS``)."""


def imported_from() -> str | None:
    """The wheel or zip file ``quiver_spark`` was imported from (this module's, which
    came with it), or None when it was imported from a directory (installed, or a
    checkout)."""
    loader = getattr(__spec__, "loader", None)
    archive = getattr(loader, "archive", None)  # a zipimport.zipimporter's
    return str(archive) if archive else None


def ship_to_workers(spark: Any) -> None:
    """When ``quiver_spark`` was imported from an archive, make the Python workers of
    ``spark`` import it from that archive too; ImportError (one line, naming
    ``--archives``) when its dependencies are not installed here. Nothing otherwise."""
    archive = imported_from()
    if archive is None:
        return
    try:
        importlib.import_module("quiver_spark.spark.datasource")
    except ImportError as e:
        raise MissingDependencyError(archive, e.name or str(e)) from None
    sc = spark.sparkContext
    name = os.path.basename(archive)
    stem, ext = os.path.splitext(name)
    shipped = name if ext.lower() in SHIPPED_AS else f"{stem}.zip"
    if shipped in (sc._python_includes or []):  # --py-files with a .zip, or a second call
        return
    if shipped != name:  # a wheel: the same bytes under a name Spark ships
        copy = os.path.join(tempfile.mkdtemp(prefix="quiver-spark-"), shipped)
        shutil.copyfile(archive, copy)
        archive = copy
    sc.addPyFile(archive)
