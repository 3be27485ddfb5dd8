"""A Spark user's usual first mistakes fail with Quiver's own message ending the first line.

What ``start()``, ``load()``, ``save()`` or ``awaitTermination()`` raise is what a user
reads first. Spark prefixes its error class; the rest of that first line must be
Quiver's one-line message naming the mistake (an unknown option as unknown, the
option as the user spelled it, the path that is not a store, an object root configured
wrong: a missing bucket, plain http not allowed, an endpoint without a scheme), at
default settings and with ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``
(which ``conf/spark-defaults.conf`` sets). A user's own UDF error keeps its traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import HttpNotAllowedError, NoSuchBucketError
from tests.moto_server import MotoS3, moto_s3, unique_prefix

__all__ = ["moto_s3"]

HIDE = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


@pytest.fixture(params=["default", "hideTraceback"])
def settings(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    if request.param == "hideTraceback":
        spark.conf.set(HIDE, "true")
    try:
        yield str(request.param)
    finally:
        spark.conf.unset(HIDE)


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def run_sink(spark: Any, tmp_path: Path, path: str, **options: str) -> None:
    """The README's producer with ``options``; raises what start()/awaitTermination() raise."""
    writer = spark.readStream.format("rate").load().writeStream.format("quiver")
    for k, v in options.items():
        writer = writer.option(k, v)
    q = writer.option("checkpointLocation", str(tmp_path / "ckpt")).start(path)
    try:
        q.awaitTermination(120)
    finally:
        q.stop()


def test_a_sink_option_typo_is_reported_as_unknown_naming_the_near_miss(
    spark: Any, tmp_path: Path, settings: str
) -> None:
    with pytest.raises(Exception) as err:
        run_sink(spark, tmp_path, str(tmp_path / "store"), **{"segment.target_sise": "32MB"})
    line = first_line(err.value)
    assert line.startswith("[STREAM_FAILED]"), line
    ours = (
        "UnknownOptionError: unknown option 'segment.target_sise' (value '32MB'); allowed: "
        "a Quiver sink option (did you mean 'segment.target_size'?)"
    )
    assert ours in line and line.endswith("see README Options)"), line
    assert not (tmp_path / "store").exists()


def test_a_source_option_of_kafka_is_reported_as_unknown_naming_the_quiver_option(
    spark: Any, tmp_path: Path, settings: str
) -> None:
    root = str(tmp_path / "store")
    spark.range(3).write.format("quiver").mode("append").save(root)
    with pytest.raises(Exception) as err:
        (spark.readStream.format("quiver").option("subscriber", "exp")
         .option("startingOffsets", "earliest").load(root))  # fmt: skip
    line = first_line(err.value)
    assert line.startswith("[PYTHON_DATA_SOURCE_ERROR]"), line
    assert "UnknownOptionError: unknown option 'startingOffsets' (value 'earliest')" in line, line
    assert line.endswith(
        "or a store option (segment.*, wal.*, retention.*, subscriber.*, storage.*)"
    ), line


def test_a_sink_pointed_at_a_file_says_the_path_is_a_file(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "part0.json"
    target.write_text('{"a": 1}\n')
    with pytest.raises(Exception) as err:
        run_sink(spark, tmp_path, str(target))
    line = first_line(err.value)
    assert line.endswith(
        f"invalid value for option 'path': '{target}'; allowed: a directory (an existing "
        "Quiver store, or a new or empty one the sink creates); this path is a file"
    ), line
    assert target.read_text() == '{"a": 1}\n'


def test_a_source_pointed_at_a_directory_of_json_files_says_it_is_not_a_store(
    spark: Any, tmp_path: Path
) -> None:
    src = tmp_path / "events"
    src.mkdir()
    (src / "part0.json").write_text('{"a": 1}\n')
    with pytest.raises(Exception) as err:
        spark.readStream.format("quiver").option("subscriber", "exp").load(str(src))
    line = first_line(err.value)
    assert line.endswith(
        f"{src} is not a Quiver store: it has no STORE file but holds 1 other entries "
        "(part0.json); point the reader at a directory written by format('quiver')"
    ), line
    assert sorted(os.listdir(src)) == ["part0.json"]


def test_a_batch_read_of_a_file_says_it_is_a_file(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "part0.json"
    target.write_text('{"a": 1}\n')
    with pytest.raises(Exception) as err:
        spark.read.format("quiver").load(str(target))
    assert first_line(err.value).endswith(
        f"{target} is a file, not a Quiver store (a store is a directory with a STORE "
        "file, created by the sink's first write)"
    ), first_line(err.value)


def test_another_segment_location_is_refused_naming_the_option(spark: Any, tmp_path: Path) -> None:
    root, a, b = (str(tmp_path / n) for n in ("store", "A", "B"))
    spark.range(3).write.format("quiver").mode("append").option("segment.path", a).save(root)
    with pytest.raises(Exception) as err:
        spark.range(3).write.format("quiver").mode("append").option("segment.path", b).save(root)
    line = first_line(err.value)
    assert line.endswith(
        f"option segment.path={b} contradicts the segment location recorded in "
        f"{root}/STORE at creation, '{a}' (omit the option to use it)"
    ), line
    with QuiverStore.open(root, partition=None, create=False) as store:
        assert store.segments_url == a


def test_a_consumer_started_before_any_write_says_to_start_the_writer_or_pass_a_schema(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    with QuiverStore.open(str(root), partition=None):
        pass  # created by a producer whose first batch is not committed yet
    with pytest.raises(Exception) as err:
        spark.readStream.format("quiver").option("subscriber", "exp").load(str(root))
    line = first_line(err.value)
    assert line.endswith(
        f"the Quiver store at {root} has no schema yet: start the writer first (the first "
        "write records the schema) or pass one with spark.readStream.schema(...)"
    ), line
    df = spark.readStream.format("quiver").schema("id long").option("subscriber", "exp")
    assert df.load(str(root)).columns == ["id"]


def test_a_user_udf_error_after_quiver_errors_keeps_its_traceback(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    for _ in range(2):  # planning workers and their reuse
        with pytest.raises(Exception) as err:
            spark.read.format("quiver").load(str(tmp_path / "nothing-here"))
        assert "Traceback" not in str(err.value)

    @udf("long")
    def boom(x: int) -> int:
        raise ValueError("the user's own bug")

    for _ in range(2):
        with pytest.raises(Exception) as err:
            spark.range(4).repartition(2).select(boom("id")).collect()
        text = str(err.value)
        assert "Traceback (most recent call last)" in text and "the user's own bug" in text


def test_a_stream_refused_when_its_reader_is_made_names_the_mistake_on_the_first_line(
    spark: Any, tmp_path: Path, settings: str
) -> None:
    root = str(tmp_path / "store")
    spark.range(3).write.format("quiver").mode("append").save(root)
    q = (
        spark.readStream.format("quiver").option("subscriber", "exp").schema("id long, nope string")
        .load(root).writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )  # fmt: skip
    try:
        with pytest.raises(Exception) as err:
            q.awaitTermination(120)
    finally:
        q.stop()
    line = first_line(err.value)
    assert line.startswith("[STREAM_FAILED]"), line
    assert "UnboundLocalError" not in line and "['nope']" in line, line


# -- an object root configured wrong (README "Object store settings") ------------------


def storage(options: dict[str, object], **changes: object) -> dict[str, str]:
    """``options`` as ``storage.<key>`` Spark options; a change to None removes the key."""
    merged = {**options, **changes}
    return {f"storage.{k}": str(v) for k, v in merged.items() if v is not None}


def test_a_sink_to_a_missing_bucket_names_the_bucket(
    spark: Any, tmp_path: Path, moto_s3: MotoS3
) -> None:
    url = f"s3://nosuchbucket/{unique_prefix('spark')}"
    with pytest.raises(Exception) as err:
        run_sink(spark, tmp_path, url, **storage(moto_s3.options))
    line = first_line(err.value)
    expected = NoSuchBucketError(
        url,
        bucket="nosuchbucket",
        endpoint=moto_s3.endpoint,
        endpoint_setting="storage.aws_endpoint",
    )
    assert line.endswith(f"quiver_spark.errors.NoSuchBucketError: {expected}"), line


def test_a_source_on_plain_http_without_allow_http_names_the_option(
    spark: Any, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('spark')}"
    with pytest.raises(Exception) as err:
        (spark.readStream.format("quiver").options(**storage(moto_s3.options, allow_http=None))
         .option("subscriber", "s").load(url))  # fmt: skip
    line = first_line(err.value)
    expected = HttpNotAllowedError(url, endpoint=moto_s3.endpoint, setting="storage.aws_allow_http")
    assert line.startswith("[PYTHON_DATA_SOURCE_ERROR]"), line
    assert line.endswith(f"quiver_spark.errors.HttpNotAllowedError: {expected}"), line


def test_a_batch_read_of_an_endpoint_without_a_scheme_is_one_line_not_a_panic(
    spark: Any, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('spark')}"
    endpoint = moto_s3.endpoint.removeprefix("http://")
    with pytest.raises(Exception) as err:
        spark.read.format("quiver").options(**storage(moto_s3.options, aws_endpoint=endpoint)).load(
            url
        )
    line = first_line(err.value)
    assert line.endswith(
        f"quiver_spark.errors.InvalidEndpointError: storage.aws_endpoint {endpoint!r} is not an "
        "endpoint URL: it has no scheme (http:// or https://); allowed: http:// or https://, a "
        "host and an optional port (e.g. http://127.0.0.1:9000 or "
        "https://s3.eu-west-1.amazonaws.com)"
    ), line
    assert "Panic" not in str(err.value) and "Traceback" not in str(err.value)
