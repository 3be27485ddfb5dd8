"""Every object store keeps the promises of the primitives (ARCHITECTURE.md §2.2): a
create never replaces, a replace only applies to the version it names, versions change
with the bytes, listings are in key order and honour ``after``, a missing key is None,
a lost response is resolved by reading back, a 409 is a retryable conflict (retried by
a cloud root itself until its budget runs out), and no message shows a credential. The
same cases run against the in-process store, a POSIX directory, S3 (moto) and
obstore's in-memory store through the cloud implementation."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from obstore.store import MemoryStore

from quiver_spark.errors import (
    ConfigError,
    ObjectConflict,
    ObjectExists,
    RetriesExhausted,
    VersionMismatch,
)
from quiver_spark.objects import ObjectStore, create_or_same, open_objects
from quiver_spark.objects.cloud import CloudObjects
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import MemoryObjects
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, s3_options, unique_prefix

IMPLEMENTATIONS = ["memory", "local", "s3", "obstore-memory"]


@pytest.fixture(params=IMPLEMENTATIONS)
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    kind = request.param
    if kind == "memory":
        return MemoryObjects(f"conf-{uuid.uuid4().hex}", "root")
    if kind == "local":
        return LocalObjects(str(tmp_path / "root"))
    if kind == "obstore-memory":
        return CloudObjects("memory:///", store=MemoryStore())
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    return open_objects(f"{moto.url}/{unique_prefix()}", moto.options)


def test_a_second_create_of_a_key_fails_and_keeps_the_first_bytes(objects: ObjectStore) -> None:
    v = objects.create("STORE", b"first")
    with pytest.raises(ObjectExists):
        objects.create("STORE", b"second")
    got = objects.get("STORE")
    assert got is not None and got.data == b"first" and got.version == v


def test_a_replace_at_a_stale_version_fails_and_writes_nothing(objects: ObjectStore) -> None:
    v1 = objects.create("POLICY", b"one")
    v2 = objects.replace("POLICY", b"two", version=v1)
    with pytest.raises(VersionMismatch):
        objects.replace("POLICY", b"three", version=v1)
    got = objects.get("POLICY")
    assert got is not None and (got.data, got.version) == (b"two", v2)


def test_a_replace_of_a_missing_key_is_a_version_mismatch(objects: ObjectStore) -> None:
    v = objects.create("a/x", b"x")
    with pytest.raises(VersionMismatch):
        objects.replace("a/y", b"y", version=v)
    assert objects.get("a/y") is None


def test_every_write_of_new_bytes_gives_a_new_version_that_reads_report(
    objects: ObjectStore,
) -> None:
    versions = [objects.create("k", b"v0")]
    versions.append(objects.replace("k", b"v1", version=versions[-1]))
    versions.append(objects.put("k", b"v2"))
    versions.append(objects.replace("k", b"v3", version=versions[-1]))
    assert len(set(versions)) == 4
    got = objects.get("k")
    assert got is not None and got.version == versions[-1] == objects.head("k")
    assert [i.version for i in objects.list("k")] == [versions[-1]]


def test_a_missing_key_reads_as_none(objects: ObjectStore) -> None:
    assert objects.get("partitions/p-0/MANIFEST") is None
    assert objects.head("partitions/p-0/MANIFEST") is None
    assert objects.list("partitions/") == []


def test_a_listing_is_in_key_order_under_a_string_prefix_and_starts_after_the_key_given(
    objects: ObjectStore,
) -> None:
    keys = ["log/00000002.ack", "log/00000010.ack", "log/00000001.ack", "log_x", "logs/a", "z"]
    for k in keys:
        objects.put(k, k.encode())
    objects.put("log/deep/er", b"nested")
    assert [i.key for i in objects.list("log/")] == [
        "log/00000001.ack",
        "log/00000002.ack",
        "log/00000010.ack",
        "log/deep/er",
    ]
    assert [i.key for i in objects.list("log/0000000")] == ["log/00000001.ack", "log/00000002.ack"]
    assert [i.key for i in objects.list("log")] == [
        "log/00000001.ack",
        "log/00000002.ack",
        "log/00000010.ack",
        "log/deep/er",
        "log_x",
        "logs/a",
    ]
    after = objects.list("log/", after="log/00000002.ack")
    assert [i.key for i in after] == ["log/00000010.ack", "log/deep/er"]
    assert [(i.key, i.size) for i in objects.list("z")] == [("z", 1)]


def test_a_directory_listing_names_the_directories_under_a_prefix_once_and_not_their_objects(
    objects: ObjectStore,
) -> None:
    for key in [
        "segments/p-0/00000000000000000001.arrow",
        "segments/p-0/00000000000000000001.meta",
        "segments/p-0/quarantine/00000000000000000002.meta",
        "segments/p-10/00000000000000000001.meta",
        "segments/QUARANTINE",
        "segmentsX/p-9/a",
        "STORE",
    ]:
        objects.create(key, b"x")
    assert objects.list_dirs("segments/") == ["p-0", "p-10"]
    assert objects.list_dirs("segments/p-0/") == ["quarantine"]
    assert objects.list_dirs("") == ["segments", "segmentsX"]
    assert objects.list_dirs("nothing/") == []
    with pytest.raises(ValueError):
        objects.list_dirs("segments")


def test_deleting_removes_the_key_and_a_missing_key_is_not_an_error(objects: ObjectStore) -> None:
    objects.create("readers/s.lease", b"held")
    objects.delete("readers/s.lease")
    objects.delete("readers/s.lease")
    objects.delete("readers/never")
    assert objects.get("readers/s.lease") is None
    objects.create("readers/s.lease", b"again")  # a deleted key can be created anew


def test_create_or_same_tells_identical_bytes_from_other_bytes(objects: ObjectStore) -> None:
    assert create_or_same(objects, "commits/app/00000001.commit", b"c1")
    assert create_or_same(objects, "commits/app/00000001.commit", b"c1")
    assert not create_or_same(objects, "commits/app/00000001.commit", b"other")


# -- faults of the in-process store ----------------------------------------------


def _lose_first(op_name: str) -> tuple[MemoryObjects, list[str]]:
    store = MemoryObjects(f"faults-{uuid.uuid4().hex}")
    lost: list[str] = []

    def after(op: str, key: str) -> None:
        if op == op_name and not lost:
            lost.append(key)
            raise OSError("connection reset while reading the response")

    store.faults.after = after
    return store, lost


def test_create_or_same_reports_a_create_whose_response_was_lost_as_done() -> None:
    store, lost = _lose_first("create")
    assert create_or_same(store, "subscribers/log/00000001.ack", b"delta")
    assert lost == ["subscribers/log/00000001.ack"]
    got = store.get("subscribers/log/00000001.ack")
    assert got is not None and got.data == b"delta"


def test_a_create_whose_response_was_lost_is_an_unknown_outcome_the_read_back_resolves() -> None:
    store, _ = _lose_first("create")
    with pytest.raises(OSError) as caught:
        store.create("k", b"mine")
    assert not isinstance(caught.value, ObjectExists)
    got = store.get("k")
    assert got is not None and got.data == b"mine"


def test_a_conflicting_conditional_write_is_retried_by_create_or_same() -> None:
    store = MemoryObjects(f"conflict-{uuid.uuid4().hex}")
    refused: list[str] = []

    def before(op: str, key: str) -> None:
        if op == "create" and not refused:
            refused.append(key)
            raise ObjectConflict(key, f"{key}: 409 ConditionalRequestConflict")

    store.faults.before = before
    assert create_or_same(store, "STORE", b"s")
    assert refused == ["STORE"]
    assert store.get("STORE") is not None


# -- obstore behaviours against an S3 endpoint -------------------------------------


class _Answering(ThreadingHTTPServer):
    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.body, self.puts = status, body, 0

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_PUT(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server = self.server
                assert isinstance(server, _Answering)
                server.puts += 1
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            do_GET = do_PUT

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def answering_409() -> Iterator[_Answering]:
    server = _Answering(
        409,
        b"<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional "
        b"operation is currently in progress against this resource.</Message></Error>",
    )
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("op", ["create", "replace"])
def test_an_s3_409_is_retried_as_a_conflict_and_never_taken_for_an_existing_object(
    answering_409: _Answering, op: str
) -> None:
    options = s3_options(answering_409.endpoint, retry_timeout="300ms")
    store = open_objects("s3://qbucket/p", options)
    with pytest.raises(RetriesExhausted, match="409") as caught:
        if op == "create":
            store.create("STORE", b"s")
        else:
            store.replace("STORE", b"s", version='"abc"')
    assert caught.value.written_nothing and "nothing was written" in str(caught.value)
    assert isinstance(caught.value.__cause__, ObjectConflict)
    assert answering_409.puts > 1


# -- credentials -------------------------------------------------------------------


def _assert_no_credentials(text: str) -> None:
    assert SECRET not in text
    assert ACCESS_KEY_ID not in text
    assert "hunter2" not in text


def test_no_message_shows_a_credential_when_the_endpoint_cannot_be_reached() -> None:
    options = s3_options(
        "http://proxyuser:hunter2@127.0.0.1:9", aws_session_token="hunter2-session-token"
    )
    store = CloudObjects(
        "s3://qbucket/p", {**options, "retry_timeout": "200ms"}, retry={"max_retries": 0}
    )
    for call in (
        lambda: store.get("k"),
        lambda: store.create("k", b"x"),
        lambda: store.replace("k", b"x", version="v"),
        lambda: store.put("k", b"x"),
        lambda: store.list(""),
    ):
        with pytest.raises(OSError) as caught:
            call()
        _assert_no_credentials(str(caught.value))
        assert "127.0.0.1" in str(caught.value) or "s3://qbucket/p" in str(caught.value)
    _assert_no_credentials(repr(store))


def test_no_message_shows_a_credential_the_server_quoted_back() -> None:
    server = _Answering(
        403,
        f"<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>{ACCESS_KEY_ID}</AWSAccessKeyId><Hint>{SECRET}</Hint></Error>".encode(),
    )
    try:
        store = open_objects("s3://qbucket/p", s3_options(server.endpoint))
        with pytest.raises(PermissionError) as caught:
            store.put("k", b"x")
    finally:
        server.shutdown()
        server.server_close()
    _assert_no_credentials(str(caught.value))
    assert "SignatureDoesNotMatch" in str(caught.value)
    assert caught.value.__cause__ is None  # the original text quoted the secret


def test_an_unknown_storage_option_is_named_with_its_near_misses_and_without_its_value() -> None:
    with pytest.raises(ConfigError) as caught:
        open_objects("s3://qbucket/p", {"aws_secret_acess_key": SECRET})
    message = str(caught.value)
    assert "'aws_secret_acess_key'" in message and "'aws_secret_access_key'" in message
    assert SECRET not in message and "\n" not in message
