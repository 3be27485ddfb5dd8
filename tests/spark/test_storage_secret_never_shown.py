"""A secret given as a ``storage.<key>`` option is never shown by Spark or Quiver: not in
the plans of a batch read or a stream (``explain``), not in a stream's progress, not in
the error of a read whose endpoint cannot be reached, nor in the error naming a
mistyped storage option (root on moto's S3 server)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from typing import Any

import pytest

from quiver_spark import QuiverStore
from quiver_spark.control.lease import current_holder
from tests.moto_server import MotoS3, moto_s3, unique_prefix

__all__ = ["moto_s3"]

SECRET = "shown-nowhere-secret-0f9a8b7c"


def shown(explain: Any) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        explain()
    return buf.getvalue()


def store_state(url: str, storage: dict[str, str]) -> str:
    """What the bucket and this machine's WAL hold, and who holds each lease: the message
    of a batch write that never became readable."""
    with QuiverStore.open(url, partition=None, create=False, storage_options=storage) as qs:
        keys = [info.key for info in qs.objects.list("")]
        holders = {k: current_holder(qs.objects, k) for k in keys if k.endswith("/LEASE")}
        wal = sorted(
            os.path.relpath(os.path.join(d, f), qs.wal_root)
            for d, _, files in os.walk(qs.wal_root)
            for f in files
        )
        return f"objects={keys} leases={holders} wal={wal}"


def test_the_secret_appears_in_no_plan_progress_or_error(
    spark: Any, tmp_path: Any, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('secret')}/store"
    options = {f"storage.{k}": str(v) for k, v in moto_s3.options.items()}
    options["storage.aws_secret_access_key"] = SECRET  # moto accepts any secret
    spark.createDataFrame([(1, "a")], "k long, v string").write.format("quiver").mode(
        "append"
    ).options(**options).option("segment.max_open_duration", "1s").save(url)

    storage = {k.removeprefix("storage."): v for k, v in options.items()}
    deadline = time.monotonic() + 60  # sealed by its slot's maintenance within ~1 s
    while True:  # a DataFrame keeps the segments of its first planning: a new one each time
        batch = spark.read.format("quiver").options(**options).load(url)
        if batch.count() == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert batch.count() == 1, store_state(url, storage)
    for mode in ("simple", "extended", "formatted", "cost"):
        assert SECRET not in shown(lambda m=mode: batch.explain(m)), mode

    q = (
        spark.readStream.format("quiver")
        .options(**options)
        .option("subscriber", "s")
        .load(url)
        .writeStream.format("quiver")
        .options(**options)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(f"{url}-copy")
    )
    assert q.awaitTermination(120) and q.exception() is None
    assert q.lastProgress is not None and q.lastProgress["numInputRows"] == 1
    assert SECRET not in shown(lambda: q.explain(True))
    assert SECRET not in json.dumps(q.recentProgress, default=str)

    # the same error after a 2 s retry budget as after the default 60 s one
    unreachable = {
        **options,
        "storage.aws_endpoint": "http://127.0.0.1:9",
        "storage.retry_timeout": "2s",
    }
    with pytest.raises(Exception) as failed:
        spark.read.format("quiver").options(**unreachable).load(url).collect()
    assert "127.0.0.1:9" in str(failed.value) and SECRET not in str(failed.value)

    typo = {**options, "storage.aws_secret_acces_key": SECRET}
    with pytest.raises(Exception) as refused:
        spark.read.format("quiver").options(**typo).load(url).collect()
    assert "aws_secret_acces_key" in str(refused.value) and SECRET not in str(refused.value)
