"""The ``quiver`` console script as installed from the built wheel into a fresh venv.

A user's view: a store written by the installed engine (a writer killed mid-segment
included), then ``quiver status``, ``subscribers``, ``gc``, ``txns`` and ``fsck`` run
as the installed console script from a scratch directory, never from the checkout.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

from integration.harness import FreshVenv
from tests.damage import flip_byte

WRITE_STORE = """
import os, sys, pyarrow as pa
from quiver_spark import QuiverStore, SegmentConfig, StoreConfig
from quiver_spark.subscribers import Outcome, SubscriberRegistry
root = sys.argv[1]
cfg = StoreConfig(segment=SegmentConfig(max_open_duration_s=600))
for pid in ("p-0", "p-1"):
    with QuiverStore.open(root, cfg, partition=pid, background=False) as s:
        for i in range(2):
            s.append(pa.record_batch({"id": pa.array(range(i * 10, i * 10 + 10))}))
            s.finalize()
with SubscriberRegistry.open(root) as reg:
    reg.register("exporter")
    reg.record("exporter", "p-0", [1, 2], Outcome.ACK)
s = QuiverStore.open(root, cfg, partition="p-2", background=False)
s.append(pa.record_batch({"id": pa.array(range(7))}))
t = s.begin_txn("old-query", 7, "0.0.1")  # a batch of a query that never comes back
s.append(pa.record_batch({"id": pa.array(range(100, 105))}), txn_id=t)
s.flush()
s.writer.write_heartbeat()  # what status reads (maintain() would also apply retention)
os._exit(0)  # killed: p-2's rows are only in its WAL
"""


OPEN_S3_SEGMENTS = """
import sys
from quiver_spark.fs import DEFAULT_IO
from quiver_spark.segment.backends import open_backend
from quiver_spark.urls import check_url
check_url("segment.path", "s3://bucket/prefix")
backend = open_backend("s3://bucket/prefix", io=DEFAULT_IO)
print(type(backend).__name__, sys.modules.get("s3fs") is not None)
"""


def quiver(
    venv: FreshVenv, *args: object, code: int = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    exe = venv.root / "bin" / "quiver"
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=venv.scratch, env=env or venv.env(),
                          check=False)  # fmt: skip
    assert proc.returncode == code, f"{args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def as_json(venv: FreshVenv, *args: object, code: int = 0) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(quiver(venv, *args, "--json", code=code).stdout)
    return doc


def test_installed_quiver_command_operates_a_store(fresh_venv: FreshVenv, tmp_path: Path) -> None:
    t0 = time.monotonic()
    root = tmp_path / "store"
    script = tmp_path / "write_store.py"
    script.write_text(textwrap.dedent(WRITE_STORE))
    subprocess.run([str(fresh_venv.python), str(script), str(root)], check=True, timeout=60,
                   cwd=fresh_venv.scratch, env=fresh_venv.env())  # fmt: skip

    assert quiver(fresh_venv, "--version").stdout.startswith("quiver, version ")
    cfg = as_json(fresh_venv, "config", root, "set", "retention.size_cap=1GB")
    assert cfg["policy"]["retention.size_cap"] == "1GB" and cfg["generation"] == 2
    status = as_json(fresh_venv, "status", root)  # the recorded policy, no option
    parts = {p["partition"]: p for p in status["partitions"]}
    assert [parts[p]["segments"] for p in ("p-0", "p-1", "p-2")] == [2, 2, 0]
    assert parts["p-2"]["stale"] is True and parts["p-2"]["open_segment_rows"] == 7
    (exporter,) = status["subscribers"]
    assert exporter["lag_segments"] == 2 and status["totals"]["size_cap_bytes"] == 1 << 30
    assert "exporter" in quiver(fresh_venv, "status", root).stdout

    quiver(fresh_venv, "subscribers", root, "add", "auditor", "--start", "latest")
    subs = as_json(fresh_venv, "subscribers", root, "list")["subscribers"]
    assert [s["name"] for s in subs] == ["auditor", "exporter"]
    quiver(fresh_venv, "subscribers", root, "remove", "auditor")
    bad = quiver(fresh_venv, "subscribers", root, "add", "no/slashes", code=2)
    assert "invalid subscriber name" in bad.stderr

    gc = as_json(fresh_venv, "gc", root)
    # p-2's WAL holds two batch records: the 7 rows and the pending batch's 5
    assert gc["finalized"] == [{"partition": "p-2", "seq": 1, "wal_records": 2}]
    assert [(d["partition"], d["seq"]) for d in gc["deleted"]] == [("p-0", 1), ("p-0", 2)]

    (pending,) = as_json(fresh_venv, "txns", root, "list")["pending"]
    assert (pending["partition"], pending["app"], pending["version"]) == ("p-2", "old-query", 7)
    quiver(fresh_venv, "txns", root, "discard", "old-query", code=2)  # needs --yes
    assert as_json(fresh_venv, "txns", root, "discard", "old-query", "--yes")["versions"] == [7]
    assert as_json(fresh_venv, "txns", root, "list")["pending"] == []

    assert as_json(fresh_venv, "fsck", root)["healthy"] is True
    seg = root / "segments" / "p-1" / f"{1:020d}.arrow"
    flip_byte(seg, seg.stat().st_size // 2)
    report = as_json(fresh_venv, "fsck", root, "--quarantine", code=1)
    assert report["quarantined"] == 1 and report["problems"][0]["file"] == str(seg)
    assert quiver(fresh_venv, "fsck", root).returncode == 0

    missing = quiver(fresh_venv, "status", tmp_path / "absent", code=2)
    assert "no such directory" in missing.stderr and "Traceback" not in missing.stderr
    assert time.monotonic() - t0 < 60


def test_installed_quiver_needs_no_s3fs_and_names_a_missing_fsspec_package(
    fresh_venv: FreshVenv, tmp_path: Path
) -> None:
    """The wheel alone serves ``s3://`` segments (obstore, a dependency, as for a root; a
    process where s3fs cannot be imported opens such a location), and a ``segment.path``
    on an fsspec filesystem whose package is missing is one line naming it, a failed
    ``--create`` leaving no store behind; a root of an unknown kind is refused in one
    line naming the kinds taken."""
    stub = tmp_path / "no-s3fs" / "s3fs"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 's3fs'\")\n")
    env = fresh_venv.env(PYTHONPATH=str(stub.parent))
    opened = subprocess.run(
        [str(fresh_venv.python), "-c", OPEN_S3_SEGMENTS], capture_output=True, text=True,
        timeout=60, cwd=fresh_venv.scratch, env=env, check=False,
    )  # fmt: skip
    assert opened.returncode == 0 and opened.stdout.split() == ["BucketBackend", "False"], (
        opened.stderr
    )
    root = tmp_path / "store"
    made = quiver(fresh_venv, "subscribers", root, "add", "exporter", "--create",
                  "-o", "segment.path=oci://bucket@ns/prefix", code=2, env=env)  # fmt: skip
    assert "pip install ocifs" in made.stderr, made.stderr
    assert "Traceback" not in made.stderr and len(made.stderr.strip().splitlines()) == 1
    assert not root.exists()
    other = quiver(fresh_venv, "status", "hdfs://nn/store", code=2, env=env)
    assert "is not a store root" in other.stderr and "Traceback" not in other.stderr
    assert "s3://bucket/prefix" in other.stderr  # names the roots it takes

    quiver(fresh_venv, "subscribers", root, "add", "exporter", "--create", env=env)
    assert "exporter" in quiver(fresh_venv, "status", f"file://{root}", "-v", env=env).stdout
    assert "--subscriber" in quiver(fresh_venv, "subscribers", "--help", env=env).stdout
