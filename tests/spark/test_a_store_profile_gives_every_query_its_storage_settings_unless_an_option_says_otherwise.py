"""Storage settings given once: a stream is written to and read from a bucket (moto's
S3 server) with the endpoint and credentials only in a store profile, named for the
whole driver by the environment variable ``QUIVER_CONFIG`` or for one query by option
``config``, and no ``storage.*`` option. A query's own ``storage.*`` option wins over
the profile; the file named by ``config`` wins over ``QUIVER_CONFIG`` (whose file is
then not read at all). A misspelt storage key in the profile, or a ``QUIVER_CONFIG``
naming no file, fails the query with Quiver's one line after Spark's prefix; no secret
of the profile is ever in an error or a plan.

The session's driver runs with ``QUIVER_CONFIG`` naming ``spark_profile``
(``tests/spark/conftest.py``), which these tests write and empty again.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from quiver_spark import QuiverStore
from tests.moto_server import SECRET, MotoS3, moto_s3, unique_prefix

from .sink_helpers import FAST, INPUT_SCHEMA, assert_exactly_once, write_input_files
from .source_helpers import Collector, run_available_now, wait_until

__all__ = ["moto_s3"]

UNREACHABLE = "http://127.0.0.1:9"
"""An endpoint nothing answers (the discard port): a profile naming it fails every
request, within its ``retry_timeout``."""


@pytest.fixture
def write_profile(spark_profile: Path) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Writes the driver's ``QUIVER_CONFIG`` profile; empties it after the test."""

    def write(doc: dict[str, Any]) -> None:
        spark_profile.write_text(yaml.safe_dump(doc))

    yield write
    spark_profile.write_text("")


def storage_of(moto: MotoS3, **changes: str) -> dict[str, str]:
    return {**{k: str(v) for k, v in moto.options.items()}, **changes}


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def write_stream(spark: Any, tmp_path: Path, url: str, keys_from: int, **options: str) -> list[int]:
    """A Parquet file streamed into ``url`` (availableNow); returns its keys once a batch
    read (with the same options) sees them."""
    src = str(tmp_path / f"in-{keys_from}")
    keys = write_input_files(src, files=1, rows=10, start=keys_from)
    df = spark.readStream.schema(INPUT_SCHEMA).parquet(src)
    writer = df.writeStream.format("quiver").option("checkpointLocation", f"{src}-ckpt")
    for k, v in {**FAST, **options}.items():
        writer = writer.option(k, v)
    q = writer.trigger(availableNow=True).start(url)
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    visible = spark.read.format("quiver").options(**options)
    wait_until(  # committed rows are sealed within segment.max_open_duration
        lambda: visible.load(url).filter(f"k >= {keys_from}").count() == len(keys),
        30,
        f"the {len(keys)} rows written readable",
    )
    return keys


def read_stream(spark: Any, tmp_path: Path, url: str, **options: str) -> list[int]:
    """Every key a new subscriber reads from ``url`` (availableNow)."""
    reader = spark.readStream.format("quiver").option("subscriber", "exporter")
    for k, v in options.items():
        reader = reader.option(k, v)
    got = Collector()
    run_available_now(reader.load(url), str(tmp_path / f"read-ckpt-{unique_prefix()}"), got)
    return got.keys()


def plan_of(df: Any) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(True)
    return buf.getvalue()


def test_a_stream_goes_through_a_bucket_with_its_storage_settings_only_in_quiver_config(
    spark: Any, tmp_path: Path, moto_s3: MotoS3, write_profile: Callable[[dict[str, Any]], None]
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('profile')}/store"
    write_profile({"storage": storage_of(moto_s3)})
    keys = write_stream(spark, tmp_path, url, 0)  # read back by a batch read too
    assert SECRET not in plan_of(spark.read.format("quiver").load(url))
    assert read_stream(spark, tmp_path, url) == keys
    with QuiverStore.open(url, partition=None, create=False, storage_options=moto_s3.options):
        pass  # the store is where the profile said: in the bucket, not on a local path
    assert not Path("s3:").exists()


def test_option_config_names_a_profile_that_wins_over_quiver_config_whole(
    spark: Any, tmp_path: Path, moto_s3: MotoS3, write_profile: Callable[[dict[str, Any]], None]
) -> None:
    """The driver's profile names an endpoint nothing answers: read, it would fail the
    query; the query's own profile (flat spelling) is the only one read."""
    url = f"{moto_s3.url}/{unique_prefix('config')}/store"
    write_profile({"storage": storage_of(moto_s3, aws_endpoint=UNREACHABLE, retry_timeout="1s")})
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({f"storage.{k}": v for k, v in storage_of(moto_s3).items()}))
    keys = write_stream(spark, tmp_path, url, 100, config=str(mine))
    assert read_stream(spark, tmp_path, url, config=str(mine)) == keys


def test_a_storage_option_of_the_query_wins_over_the_profile(
    spark: Any, tmp_path: Path, moto_s3: MotoS3, write_profile: Callable[[dict[str, Any]], None]
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('override')}/store"
    write_profile({"storage": storage_of(moto_s3, aws_endpoint=UNREACHABLE, retry_timeout="1s")})
    right = {"storage.aws_endpoint": moto_s3.endpoint}
    df = spark.createDataFrame([(k, f"v{k}") for k in range(20)], "k long, v string")
    writer = df.write.format("quiver").mode("append").options(**FAST)
    writer.options(**right).save(url)
    reader = spark.read.format("quiver").options(**right)
    wait_until(lambda: reader.load(url).count() == 20, 30, "the 20 rows written readable")
    assert_exactly_once(reader.load(url).toArrow(), list(range(20)))
    with pytest.raises(Exception) as err:  # the profile's endpoint, without the option
        spark.read.format("quiver").load(url).collect()
    line = first_line(err.value)
    assert "EndpointUnreachableError: nothing answered at http://127.0.0.1:9" in line, line
    assert SECRET not in str(err.value)


@pytest.mark.parametrize("named_by", ["QUIVER_CONFIG", "config"])
def test_a_misspelt_storage_key_in_the_profile_fails_the_query_naming_the_near_miss(
    spark: Any,
    tmp_path: Path,
    moto_s3: MotoS3,
    write_profile: Callable[[dict[str, Any]], None],
    spark_profile: Path,
    named_by: str,
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('typo')}/store"
    doc = {"storage": {**storage_of(moto_s3), "aws_endpiont": moto_s3.endpoint}}
    if named_by == "QUIVER_CONFIG":
        write_profile(doc)
        path, options, who = spark_profile, {}, "the environment variable QUIVER_CONFIG"
    else:
        path = tmp_path / "typo.yaml"
        path.write_text(yaml.safe_dump(doc))
        options, who = {"config": str(path)}, "option 'config'"
    ours = (
        f"StoreProfileError: unknown storage key 'aws_endpiont' in the store profile "
        f"'{path}' (named by {who}) (did you mean 'aws_endpoint' or 'aws_endpoint_url'?)"
    )
    with pytest.raises(Exception) as err:
        spark.readStream.format("quiver").option("subscriber", "s").options(**options).load(url)
    line = first_line(err.value)
    assert line.startswith("[PYTHON_DATA_SOURCE_ERROR]") and ours in line, line
    assert SECRET not in str(err.value)
    with pytest.raises(Exception) as err:
        write_stream(spark, tmp_path, url, 200, **options)
    line = first_line(err.value)
    assert line.startswith("[STREAM_FAILED]") and ours in line, line
    assert SECRET not in str(err.value)


def test_a_quiver_config_naming_no_file_fails_the_query_naming_the_variable_and_the_path(
    spark: Any,
    moto_s3: MotoS3,
    write_profile: Callable[[dict[str, Any]], None],
    spark_profile: Path,
) -> None:
    spark_profile.unlink()  # write_profile makes it again, empty
    with pytest.raises(Exception) as err:
        spark.read.format("quiver").load(f"{moto_s3.url}/{unique_prefix('nofile')}/store")
    line = first_line(err.value)
    assert line.startswith("[PYTHON_DATA_SOURCE_ERROR]"), line
    assert line.endswith(
        f"StoreProfileError: the environment variable QUIVER_CONFIG names '{spark_profile}', "
        "which is not a readable YAML file (No such file or directory): set QUIVER_CONFIG to "
        "the path of a store profile (a YAML file in the layout of conf/quiver.yaml), or "
        "unset it"
    ), line
