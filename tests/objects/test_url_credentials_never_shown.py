"""A credential written into a root URL (``s3://KEY:SECRET@bucket/prefix``) is never
shown: ``quiver status`` (with or without ``--json``) refuses such a URL in one line
naming where credentials go, without echoing them. Storage-option secrets are redacted everywhere they could be
shown (ARCHITECTURE.md §2), and a URL's userinfo is one of them (``redact`` removes
it from URLs); what a command prints is a thing a user pastes into a ticket.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from tests.moto_server import MotoS3, unique_prefix

URL_SECRET = "urlsecretvalue0123456789"


def test_a_root_url_with_a_password_in_it_is_refused_without_showing_it(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    prefix = unique_prefix("cred")
    cfg = StoreConfig(
        wal=WalConfig(path=os.path.join(str(tmp_path), "wal"), flush_interval_s=0),
        segment=SegmentConfig(max_open_duration_s=3600),
    )
    with QuiverStore.open(
        f"{moto_s3.url}/{prefix}",
        cfg,
        partition="p-0",
        storage_options=moto_s3.options,
        background=False,
    ) as w:
        w.append(pa.record_batch({"id": [1, 2, 3]}))
        w.flush()
        w.finalize()
    url = f"s3://AKIAURLUSER:{URL_SECRET}@{moto_s3.url.removeprefix('s3://')}/{prefix}"
    flags = [f"--storage-option={k}={v}" for k, v in moto_s3.options.items()]
    for extra in ([], ["--json"]):
        out = subprocess.run(
            [sys.executable, "-m", "quiver_spark.cli", "status", url, *flags, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2, out.stderr  # refused: credentials go in storage options
        assert "without credentials in it" in out.stderr and "storage" in out.stderr
        assert URL_SECRET not in out.stdout + out.stderr
