"""What the environment sets for an object root's client (``AWS_ENDPOINT``,
``AWS_ALLOW_HTTP``, credentials, region) applies unless a storage option sets the same
key: a store on an S3 endpoint over plain HTTP is opened, written and read with nothing
but the environment, and an explicit option still wins over the environment, for the
client's HTTP settings and its configuration keys alike. Each store runs in a new
interpreter given only that environment, so this test's own stays untouched; Quiver's
own storage option ``retry_timeout`` is never handed to the client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quiver_spark.errors import ConfigError
from quiver_spark.objects import StorageOptions, open_objects
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, unique_prefix

REPO = Path(__file__).resolve().parents[2]

WRITE_AND_READ = """
import json
import pyarrow as pa
from quiver_spark import QuiverStore, StoreConfig, WalConfig
cfg = StoreConfig(wal=WalConfig(path=wal, flush_interval_s=0))
with QuiverStore.open(url, cfg, partition="p-0", storage_options=options,
                      background=False) as store:
    store.append(pa.record_batch({"id": [1, 2, 3]}))
    store.flush()
    store.finalize()
with QuiverStore.open(url, cfg, partition=None, storage_options=options,
                      background=False) as reader:
    ids = sorted(i for b in reader.scan() for i in b.column("id").to_pylist())
print(json.dumps(ids))
"""


def run_with_environment(
    tmp_path: Path, environment: dict[str, str], url: str, options: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``WRITE_AND_READ`` in a new interpreter whose environment holds no ``AWS_*``,
    ``GOOGLE_*`` or ``AZURE_*`` variable but ``environment``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env = {**base, **environment, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path)}
    names = {"url": url, "options": options, "wal": str(tmp_path / "wal")}
    code = "".join(f"{k} = {v!r}\n" for k, v in names.items()) + WRITE_AND_READ
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        cwd=tmp_path,
    )


def moto_environment(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def ids(done: subprocess.CompletedProcess[str]) -> list[int]:
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("endpoint_variable", ["AWS_ENDPOINT", "AWS_ENDPOINT_URL"])
def test_a_store_on_a_plain_http_endpoint_works_from_the_environment_alone(
    moto_s3: MotoS3, tmp_path: Path, endpoint_variable: str
) -> None:
    environment = moto_environment(moto_s3.endpoint)
    environment[endpoint_variable] = environment.pop("AWS_ENDPOINT")
    url = f"{moto_s3.url}/{unique_prefix('env')}"
    assert ids(run_with_environment(tmp_path, environment, url, {})) == [1, 2, 3]


def test_a_client_option_given_keeps_the_environment_s_other_client_settings(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('env')}"
    options = {"timeout": "30s", "retry_timeout": "20s"}  # AWS_ALLOW_HTTP still applies
    done = run_with_environment(tmp_path, moto_environment(moto_s3.endpoint), url, options)
    assert ids(done) == [1, 2, 3]


def test_an_option_wins_over_the_environment(moto_s3: MotoS3, tmp_path: Path) -> None:
    environment = {
        **moto_environment("http://127.0.0.1:9"),  # nothing listens there
        "AWS_ALLOW_HTTP": "false",
    }
    url = f"{moto_s3.url}/{unique_prefix('env')}"
    options = {"aws_endpoint": moto_s3.endpoint, "allow_http": "true"}
    assert ids(run_with_environment(tmp_path, environment, url, options)) == [1, 2, 3]
    refused = run_with_environment(
        tmp_path, environment, url, {"aws_endpoint": moto_s3.endpoint, "retry_timeout": "1s"}
    )
    assert refused.returncode != 0 and "builder error" in refused.stderr, refused.stderr


def test_the_environment_s_client_keys_are_kept_under_the_options_own() -> None:
    options = StorageOptions({"aws_timeout": "5s", "aws_region": "eu-west-1"})
    environ = {
        "AWS_ALLOW_HTTP": "true",
        "AWS_TIMEOUT": "99s",
        "AWS_REGION": "us-east-1",  # a configuration key: obstore itself lets options win
        "GOOGLE_PROXY_URL": "http://another-cloud:3128",
        "HOME": "/root",
    }
    config, client = options.split("s3", environ)
    assert client == {"allow_http": "true", "timeout": "5s"}
    assert config == {"aws_region": "eu-west-1"}
    assert options.split("s3", {}) == ({"aws_region": "eu-west-1"}, {"timeout": "5s"})


def test_retry_timeout_is_read_by_quiver_and_never_handed_to_the_client() -> None:
    options = StorageOptions({"retry_timeout": "90s", "aws_region": "us-east-1"})
    assert options.retry_timeout_s == 90.0
    assert options.split("s3", {}) == ({"aws_region": "us-east-1"}, {})
    assert StorageOptions({}).retry_timeout_s == 60.0
    cloud = open_objects("s3://bucket/root", {"retry_timeout": "2500ms", "region": "us-east-1"})
    assert cloud.budget.timeout_s == 2.5  # type: ignore[attr-defined]
    for bad in ("0s", "-1s", "soon"):
        with pytest.raises(ConfigError, match=r"storage\.retry_timeout"):
            open_objects("s3://bucket/root", {"retry_timeout": bad})
    with pytest.raises(ConfigError, match="did you mean 'retry_timeout'"):
        open_objects("s3://bucket/root", {"retry_timeot": "1s"})
