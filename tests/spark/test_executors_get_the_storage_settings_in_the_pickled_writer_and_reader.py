"""Executors need neither ``QUIVER_CONFIG`` nor the store profile it names: the
driver resolves the storage settings when it builds the writer and the reader
(``DataSource.writer()``/``reader()`` run in its planning workers), and they reach
executor tasks inside the pickled writer and the pickled input partitions. Here the
driver's role is this process (``QUIVER_CONFIG`` set, no storage option), and an
executor's is a fresh process without the variable, without the file (deleted before it
starts) and without any ``AWS_*`` variable: it writes a task's rows into the bucket
(moto's S3 server) and reads them back. Neither object's ``repr`` shows a secret.
"""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql.types import LongType, StructField, StructType

from quiver_spark.spark.sink import QuiverBatchWriter
from quiver_spark.spark.source import QuiverBatchReader
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, moto_s3, unique_prefix

__all__ = ["moto_s3"]

REPO = Path(__file__).resolve().parents[2]
SCHEMA = StructType([StructField("k", LongType(), False)])

EXECUTOR = textwrap.dedent(
    """
    import base64, pickle, sys
    import pyarrow as pa

    role, blob = sys.argv[1], base64.b64decode(sys.stdin.readline())
    if role == "write":
        writer = pickle.loads(blob)
        message = writer.write(iter([pa.record_batch({"k": pa.array(range(10), pa.int64())})]))
        print(base64.b64encode(pickle.dumps(message)).decode(), flush=True)
        sys.stdin.readline()  # the driver committed: closing the slot seals the rows
    else:
        reader, partitions = pickle.loads(blob)
        print(sorted(k for p in partitions for b in reader.read(p) for k in b.column(0).to_pylist()))
    """
)


def executor_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "QUIVER_CONFIG"}
    return {**env, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(home)}


def executor(role: str, home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", EXECUTOR, role],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=executor_env(home), cwd=home,
    )  # fmt: skip


def shipped(obj: Any) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode() + "\n"


@pytest.fixture
def driver_profile(moto_s3: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as the driver: ``QUIVER_CONFIG`` names a profile with moto's
    settings, and no ``AWS_*`` variable is set."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"storage": {k: str(v) for k, v in moto_s3.options.items()}}))
    monkeypatch.setenv("QUIVER_CONFIG", str(profile))
    return profile


def test_an_executor_without_quiver_config_or_the_file_writes_and_reads_the_bucket(
    moto_s3: MotoS3, tmp_path: Path, driver_profile: Path
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('executors')}/store"
    options = {"path": url, "segment.max_open_duration": "300ms"}
    writer = QuiverBatchWriter(options, SCHEMA, False)  # the driver resolves the profile
    reader_home = tmp_path / "executor-2"
    reader_home.mkdir()
    text = driver_profile.read_text()
    driver_profile.unlink()  # executors never see the file

    task = executor("write", tmp_path)
    assert task.stdin is not None and task.stdout is not None
    task.stdin.write(shipped(writer))
    task.stdin.flush()
    line = task.stdout.readline()
    assert line, task.communicate()[1]
    message = pickle.loads(base64.b64decode(line))
    assert message.rows == 10 and message.partition is not None, message
    writer.commit([message])  # the driver: the writer it built, as Spark's batch commit
    _, err = task.communicate("\n", timeout=60)
    assert task.returncode == 0, err

    driver_profile.write_text(text)  # the driver reads it again to plan the read
    reader = QuiverBatchReader({"path": url}, SCHEMA)
    partitions = reader.partitions()
    driver_profile.unlink()
    done = subprocess.run(
        [sys.executable, "-c", EXECUTOR, "read"], input=shipped((reader, partitions)),
        capture_output=True, text=True, timeout=120, env=executor_env(reader_home),
        cwd=reader_home, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(range(10)))
    for obj in (writer, reader, reader.opts, *partitions):
        for secret in (SECRET, ACCESS_KEY_ID):
            assert secret not in repr(obj), type(obj)
