"""``quiver`` takes an object root's storage settings from a store profile: the YAML
file named by ``--config`` or, without it, by the environment variable
``QUIVER_CONFIG``, its ``storage:`` section used (not dropped); ``-S KEY=VALUE`` wins
over the profile. A misspelt storage key in the profile, or a ``QUIVER_CONFIG`` naming
no file, is one line naming the file (or the variable) and the near miss, exit 2; no
secret of the profile appears in any output. Every run is a real ``quiver status``
process against moto's S3 server, with no ``AWS_*`` variable in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from quiver_spark import QuiverStore
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, moto_s3, unique_prefix

from .conftest import REPO

__all__ = ["moto_s3"]

UNREACHABLE = "http://127.0.0.1:9"


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def store_url(moto_s3: MotoS3) -> str:
    """An object root holding one segment of 3 rows."""
    url = f"{moto_s3.url}/{unique_prefix('profile-cli')}/store"
    with QuiverStore.open(
        url, storage_options=moto_s3.options, partition="p-0", background=False
    ) as store:
        store.append(pa.record_batch({"x": [1, 2, 3]}))
        store.flush()
        store.finalize()
    return url


def write_profile(path: Path, storage: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({"storage": {k: str(v) for k, v in storage.items()}}))
    return path


def status(url: str, home: Path, *flags: str, quiver_config: Path | None = None) -> Ran:
    """``quiver status URL --json FLAGS`` as a new process, without ``AWS_*`` variables,
    with ``QUIVER_CONFIG`` only when ``quiver_config``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "QUIVER_CONFIG"}
    env.update(PYTHONPATH=str(REPO), XDG_CACHE_HOME=str(home))
    if quiver_config is not None:
        env["QUIVER_CONFIG"] = str(quiver_config)
    done = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "status", url, "--json", *flags],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=home,
    )  # fmt: skip
    ran = Ran(done.returncode, done.stdout, done.stderr)
    for shown in (SECRET, ACCESS_KEY_ID):
        assert shown not in ran.out + ran.err
    return ran


def rows_of(ran: Ran) -> int:
    assert ran.code == 0, ran.out + ran.err
    doc = json.loads(ran.out)
    return sum(p["rows"] for p in doc["partitions"])


def test_status_reads_the_storage_settings_of_the_profile_named_by_quiver_config(
    store_url: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path / "profile.yaml", moto_s3.options)
    assert rows_of(status(store_url, tmp_path, quiver_config=profile)) == 3


def test_status_reads_the_storage_section_of_the_file_named_by_config(
    store_url: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path / "q.yaml", moto_s3.options)
    elsewhere = write_profile(tmp_path / "env.yaml", {**moto_s3.options, "aws_endpoint": "x"})
    ran = status(store_url, tmp_path, "--config", str(profile), quiver_config=elsewhere)
    assert rows_of(ran) == 3  # QUIVER_CONFIG's file (an endpoint refused) is not read


def test_a_storage_option_flag_wins_over_the_profile(
    store_url: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    wrong = {**moto_s3.options, "aws_endpoint": UNREACHABLE, "retry_timeout": "1s"}
    profile = write_profile(tmp_path / "profile.yaml", wrong)
    right = ("-S", f"aws_endpoint={moto_s3.endpoint}")
    assert rows_of(status(store_url, tmp_path, *right, quiver_config=profile)) == 3
    assert rows_of(status(store_url, tmp_path, *right, "--config", str(profile))) == 3
    unreachable = status(store_url, tmp_path, quiver_config=profile)  # the profile's endpoint
    assert unreachable.code == 1
    assert unreachable.err.startswith("Error: nothing answered at http://127.0.0.1:9 "), unreachable


@pytest.mark.parametrize("named_by", ["QUIVER_CONFIG", "--config"])
def test_a_misspelt_storage_key_in_the_profile_is_one_line_naming_the_near_miss(
    store_url: str, moto_s3: MotoS3, tmp_path: Path, named_by: str
) -> None:
    options = dict(moto_s3.options)
    options["aws_endpiont"] = options.pop("aws_endpoint")
    profile = write_profile(tmp_path / "typo.yaml", options)
    if named_by == "QUIVER_CONFIG":
        ran = status(store_url, tmp_path, quiver_config=profile)
        who = "the environment variable QUIVER_CONFIG"
    else:
        ran = status(store_url, tmp_path, "--config", str(profile))
        who = "--config"
    assert ran.code == 2 and ran.out == "", ran
    assert ran.err.splitlines() == [
        f"Error: unknown storage key 'aws_endpiont' in the store profile '{profile}' (named "
        f"by {who}) (did you mean 'aws_endpoint' or 'aws_endpoint_url'?); allowed: obstore's "
        "configuration keys (aws_endpoint, aws_region, aws_access_key_id, "
        "google_service_account, azure_storage_account_name, ...), its client keys "
        "(allow_http, timeout, ...) or retry_timeout"
    ], ran.err


def test_a_quiver_config_naming_no_file_is_one_line_naming_the_variable_and_the_path(
    store_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    ran = status(store_url, tmp_path, quiver_config=missing)
    assert ran.code == 2 and ran.out == "", ran
    assert ran.err.splitlines() == [
        f"Error: the environment variable QUIVER_CONFIG names '{missing}', which is not a "
        "readable YAML file (No such file or directory): set QUIVER_CONFIG to the path of a "
        "store profile (a YAML file in the layout of conf/quiver.yaml), or unset it"
    ], ran.err
