"""``quiver gc --full`` on a store whose root is on an object store removes the
segment objects no MANIFEST published (orphans a writer left after its lease was
taken over) and nothing published: run as a real process against an S3 endpoint,
``--dry-run`` names them first and removes nothing, and every row a reader could read
before is read after (ARCHITECTURE.md §11.3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore
from quiver_spark.objects import open_objects
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.stores import fenced_finalize, id_batch, taken_over_while_paused, wal_in

from .conftest import REPO

__all__ = ["moto_s3"]


pytestmark = pytest.mark.usefixtures("observed_leases_forgotten")


def gc(url: str, s3: MotoS3, home: Path, *flags: str) -> dict[str, Any]:
    opts = [f for k, v in s3.options.items() for f in ("-S", f"{k}={v}")]
    argv = [sys.executable, "-m", "quiver_spark.cli", "gc", url, "--json", *flags, *opts]
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(home)}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env=env, check=False, cwd=home
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_gc_full_removes_the_orphans_a_fenced_writer_left_and_nothing_published(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('orphans')}"
    opts = moto_s3.options

    def open_writer(wal: str) -> QuiverStore:
        return QuiverStore.open(
            url, wal_in(tmp_path / wal), partition="p-0", background=False, storage_options=opts
        )

    zombie = open_writer("wal-a")
    zombie.append(id_batch(0, 3))
    zombie.flush()
    zombie.finalize()
    successor = taken_over_while_paused(zombie, lambda: open_writer("wal-b"))
    fenced_finalize(zombie)  # its segment objects stay behind, unpublished
    successor.append(id_batch(200, 3))
    successor.flush()
    assert successor.finalize() is not None
    successor.close()
    zombie.close()

    objects = open_objects(url, opts)

    def segment_keys() -> list[str]:
        return sorted(o.key.rsplit("/", 1)[1] for o in objects.list("segments/p-0/"))

    # fenced at its look before the .meta (§11.3): its upload of seq 2 stays, never read
    orphan = ["00000000000000000002.arrow"]
    assert set(orphan) <= set(segment_keys())
    home = tmp_path / "elsewhere"
    home.mkdir()
    dry = gc(url, moto_s3, home, "--full", "--dry-run")
    assert dry["orphans"] == [{"partition": "p-0", "seq": 2}]
    assert set(orphan) <= set(segment_keys())
    done = gc(url, moto_s3, home, "--full")
    assert done["orphans"] == [{"partition": "p-0", "seq": 2}]
    assert segment_keys() == [
        "00000000000000000001.arrow",
        "00000000000000000001.meta",
        "00000000000000000003.arrow",
        "00000000000000000003.meta",
    ]
    with QuiverStore.open(
        url, wal_in(tmp_path / "wal-r"), partition=None, create=False, storage_options=opts
    ) as r:
        assert sorted(x for b in r.scan() for x in b.column("id").to_pylist()) == [
            0, 1, 2, 200, 201, 202,
        ]  # fmt: skip
    assert gc(url, moto_s3, home, "--full")["orphans"] == []
