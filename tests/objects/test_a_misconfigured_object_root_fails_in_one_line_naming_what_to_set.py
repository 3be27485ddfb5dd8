"""An object root a user configured wrong fails, through the engine's two doors
(``QuiverStore.open``, what the sink opens, and ``Subscription.open``, what the source
opens), with one :class:`~quiver_spark.errors.StorageConfigError`: one line naming what
is wrong and what to set, never a secret, never obstore's raw text, a panic or "start
the writer first". Each case is met for real: moto's S3 server (a second one with IAM
authentication turned on for access denied), a closed local port and a listener that
never accepts (nothing answers), a stub server answering as S3 does to a request signed
for another region (moto 5.2.5 serves any region: it never answers that way).

Nothing answering fails within ``storage.retry_timeout``; a transient failure is still
retried (:func:`~quiver_spark.objects.retry.transient`). README's table of these errors
is their own first lines.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

from quiver_spark import QuiverStore
from quiver_spark.errors import (
    AccessDeniedError,
    EndpointUnreachableError,
    HttpNotAllowedError,
    InvalidEndpointError,
    NoCredentialsError,
    NoSuchBucketError,
    StorageConfigError,
    WrongRegionError,
)
from quiver_spark.objects import StorageOptions, open_objects
from quiver_spark.objects.cloud import classify
from quiver_spark.objects.errors_doc import ROWS, first_line, storage_errors_table
from quiver_spark.objects.retry import transient
from quiver_spark.subscription import Subscription
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, moto_server, unique_prefix
from tests.stores import wal_in

README = Path(__file__).resolve().parents[2] / "README.md"
DOORS = ("sink", "source")
SLACK_S = 0.75
"""What a call may take past ``storage.retry_timeout``: this process's own overhead."""


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials, endpoint and region come from each test's options alone."""
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Failed:
    error: StorageConfigError
    seconds: float


def fail(door: str, url: str, options: dict[str, object], tmp_path: Path) -> Failed:
    """What opening ``url`` from ``door`` raised (it must raise a StorageConfigError), and
    how long it took; the message is one line that shows no secret."""
    wal = tmp_path / f"wal-{door}-{unique_prefix()}"
    started = time.monotonic()
    with pytest.raises(StorageConfigError) as caught:
        if door == "sink":
            QuiverStore.open(
                url, wal_in(wal), partition="p-0", background=False, storage_options=options
            ).close()
        else:
            Subscription.open(url, "s", config=wal_in(wal), storage_options=options).close()
    seconds = time.monotonic() - started
    text = str(caught.value)
    assert "\n" not in text and "Error performing" not in text, text
    assert "start the writer first" not in text
    for secret in (SECRET, ACCESS_KEY_ID, "hunter2"):
        assert secret not in text and secret not in repr(caught.value.args), text
    return Failed(caught.value, seconds)


def root(s3: MotoS3, bucket: str | None = None) -> str:
    base = f"s3://{bucket}" if bucket else s3.url
    return f"{base}/{unique_prefix('misconf')}"


# -- credentials ---------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
def test_no_credentials_say_where_they_were_looked_for_and_what_to_set(
    door: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    metadata = f"http://127.0.0.1:{closed_port()}"  # as on a laptop: nothing answers there
    options = {
        k: v for k, v in moto_s3.options.items() if k not in ("aws_access_key_id", "aws_secret_access_key")
    }  # fmt: skip
    options |= {"aws_metadata_endpoint": metadata, "retry_timeout": "1s"}
    got = fail(door, root(moto_s3), options, tmp_path)
    assert isinstance(got.error, NoCredentialsError)
    assert got.error.setting == "storage.aws_access_key_id"
    text = str(got.error)
    for where in ("storage.aws_access_key_id", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert where in text
    assert f"instance metadata service at {metadata} did not answer (connection refused)" in text
    assert "set storage.aws_access_key_id and storage.aws_secret_access_key" in text
    assert got.seconds < 1 + SLACK_S


def test_the_metadata_service_refusing_reads_as_no_credentials() -> None:
    """The metadata service answering instead of timing out (a sandbox's egress filter,
    a cloud VM without a role): obstore's text as met on such a machine."""
    raw = (
        "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in "
        "1.523741ms - Server returned non-2xx status code: 403 Forbidden: resolve_deny: "
        "denied destination"
    )
    err = classify(
        OSError(raw), url="s3://b/p", op="get", key="STORE", options=StorageOptions(), family="s3"
    )
    assert isinstance(err, NoCredentialsError)
    assert "instance metadata service at http://169.254.169.254 answered 403 Forbidden" in str(err)


def test_half_a_key_pair_names_the_missing_half() -> None:
    with pytest.raises(NoCredentialsError) as caught:
        open_objects("s3://qbucket/p", {"aws_access_key_id": ACCESS_KEY_ID, "region": "us-east-1"})
    assert caught.value.setting == "storage.aws_secret_access_key"
    assert "storage.aws_access_key_id is set but storage.aws_secret_access_key is not" in str(
        caught.value
    )
    assert ACCESS_KEY_ID not in str(caught.value)


@dataclass(frozen=True)
class Authenticating:
    """A moto S3 server that checks every request's signature and the caller's IAM
    policies: ``allowed`` may do anything, ``denied`` has no policy."""

    endpoint: str
    allowed: tuple[str, str]
    denied: tuple[str, str]

    def options(self, key: tuple[str, str]) -> dict[str, object]:
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": key[0],
            "aws_secret_access_key": key[1],
            "aws_region": "us-east-1",
            "allow_http": "true",
        }


@pytest.fixture(scope="module")
def authenticating() -> Iterator[Authenticating]:
    with moto_server() as endpoint:
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name="us-east-1",
            aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="unused",
        )  # fmt: skip
        keys = {}
        for user in ("allowed", "denied"):
            iam.create_user(UserName=user)
            made = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (made["AccessKeyId"], made["SecretAccessKey"])
        everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}  # fmt: skip
        iam.put_user_policy(
            UserName="allowed", PolicyName="all", PolicyDocument=json.dumps(everything)
        )
        request = urllib.request.Request(  # from now on every request is authenticated
            f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=10).read()
        yield Authenticating(endpoint, keys["allowed"], keys["denied"])


def test_the_authenticating_server_serves_a_key_that_may(
    authenticating: Authenticating, tmp_path: Path
) -> None:
    url = f"s3://qbucket/{unique_prefix('auth')}"
    options = authenticating.options(authenticating.allowed)
    with QuiverStore.open(
        url, wal_in(tmp_path / "wal"), partition=None, storage_options=options
    ) as store:
        assert store.objects.get("STORE") is not None


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("case", "code", "setting"),
    [
        ("no policy", "AccessDenied", "storage.aws_access_key_id"),
        ("unknown key id", "InvalidAccessKeyId", "storage.aws_access_key_id"),
        ("wrong secret", "SignatureDoesNotMatch", "storage.aws_secret_access_key"),
    ],
)
def test_access_denied_names_the_credential_to_fix(
    door: str,
    case: str,
    code: str,
    setting: str,
    authenticating: Authenticating,
    tmp_path: Path,
) -> None:
    key = {
        "no policy": authenticating.denied,
        "unknown key id": ("AKIAUNKNOWNKEY000000", "x" * 40),
        "wrong secret": (authenticating.allowed[0], "not-its-secret-" + "y" * 25),
    }[case]
    url = f"s3://qbucket/{unique_prefix('denied')}"
    got = fail(door, url, authenticating.options(key), tmp_path)
    assert isinstance(got.error, AccessDeniedError) and isinstance(got.error, PermissionError)
    assert (got.error.status, got.error.code, got.error.setting) == (403, code, setting)
    text = str(got.error)
    assert text.startswith(f"access denied to {url}: ") and setting in text
    assert f"{key[0][:4]}...{key[0][-4:]}" in text  # the key id, never whole
    assert key[0] not in text and key[1] not in text
    if code == "AccessDenied":
        assert "grant s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket" in text


# -- the bucket, the endpoint, the region -----------------------------------------------


@pytest.mark.parametrize("door", DOORS)
def test_a_missing_bucket_is_named_not_taken_for_a_store_without_a_writer(
    door: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    got = fail(door, root(moto_s3, "nosuchbucket"), moto_s3.options, tmp_path)
    assert isinstance(got.error, NoSuchBucketError)
    assert got.error.bucket == "nosuchbucket" and got.error.endpoint == moto_s3.endpoint
    assert str(got.error).startswith(
        f"bucket 'nosuchbucket' does not exist at {moto_s3.endpoint} (s3://nosuchbucket/"
    )
    assert "storage.aws_endpoint" in str(got.error)


@pytest.fixture
def never_accepting() -> Iterator[str]:
    """An endpoint whose connections never complete (a full accept queue drops every
    new SYN, as a firewall that drops packets does)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        queued.append(c)
    time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    for c in queued:
        c.close()
    listener.close()


@pytest.fixture
def never_answering() -> Iterator[str]:
    """An endpoint that accepts every connection and reads the request, and never
    answers (a hung proxy or load balancer)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for c in held:
        c.close()
    listener.close()


@pytest.mark.parametrize("door", DOORS)
def test_an_endpoint_that_accepts_and_never_answers_fails_within_retry_timeout_naming_it(
    door: str, moto_s3: MotoS3, tmp_path: Path, never_answering: str
) -> None:
    """obstore's request timeout is 30 s: with a 2 s budget a hung endpoint took 30 s
    and read as obstore's raw "error sending request", before a root's request timeout
    became at most half its budget."""
    options = {**moto_s3.options, "aws_endpoint": never_answering, "retry_timeout": "2s"}
    got = fail(door, root(moto_s3), options, tmp_path)
    assert isinstance(got.error, EndpointUnreachableError) and got.error.retryable
    assert str(got.error).startswith(f"nothing answered at {never_answering} ({moto_s3.url}/")
    assert "got no answer (connected, but no answer within the request timeout)" in str(got.error)
    assert "storage.retry_timeout being 2s" in str(got.error)
    assert got.seconds < 2 + SLACK_S, got.seconds


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("endpoint_kind", ["closed port", "never accepting"])
def test_an_endpoint_nothing_answers_at_fails_within_retry_timeout_naming_it(
    door: str,
    endpoint_kind: str,
    moto_s3: MotoS3,
    tmp_path: Path,
    never_accepting: str,
) -> None:
    """obstore's connect timeout is 5 s: with a 2 s budget, an endpoint that never
    accepts took 5 s before a root's connect timeout became a quarter of its budget."""
    endpoint = (
        f"http://127.0.0.1:{closed_port()}" if endpoint_kind == "closed port" else never_accepting
    )
    options = {**moto_s3.options, "aws_endpoint": endpoint, "retry_timeout": "2s"}
    got = fail(door, root(moto_s3), options, tmp_path)
    assert isinstance(got.error, EndpointUnreachableError) and got.error.retryable
    assert got.error.setting == "storage.aws_endpoint" and got.error.endpoint == endpoint
    reason = "connection refused" if endpoint_kind == "closed port" else "connect timed out"
    assert str(got.error).startswith(f"nothing answered at {endpoint} ({moto_s3.url}/")
    assert f"could not connect ({reason})" in str(got.error)
    assert "storage.retry_timeout being 2s" in str(got.error)
    assert got.error.attempts >= 2
    assert got.seconds < 2 + SLACK_S, got.seconds


@pytest.mark.parametrize("door", DOORS)
def test_plain_http_without_allow_http_names_the_option_to_set(
    door: str, moto_s3: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {k: v for k, v in moto_s3.options.items() if k != "allow_http"}
    got = fail(door, root(moto_s3), options, tmp_path)
    assert isinstance(got.error, HttpNotAllowedError)
    assert got.error.setting == "storage.aws_allow_http"
    assert str(got.error).startswith(f"the endpoint {moto_s3.endpoint} is plain http")
    assert "set storage.aws_allow_http=true, or use an https:// endpoint" in str(got.error)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "false")
    got = fail(door, root(moto_s3), options, tmp_path)
    assert "(the environment sets AWS_ALLOW_HTTP=false)" in str(got.error)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("127.0.0.1:9000", "it has no scheme (http:// or https://)"),
        ("localhost:9000", "it has no scheme (http:// or https://)"),
        ("http://", "it has no host"),
        ("http://127.0.0.1:99999", "its port is not a number from 1 to 65535"),
        ("http://minio host:9000", "it contains whitespace"),
        ("ftp://127.0.0.1:9000", "its scheme ftp:// is neither http:// nor https://"),
        ("http://bad_host!:9000", "its host 'bad_host!' is not a host name or IP address"),
    ],
)
@pytest.mark.parametrize("door", DOORS)
def test_a_malformed_endpoint_is_refused_before_any_request_never_a_panic(
    door: str, value: str, reason: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    got = fail(door, root(moto_s3), {**moto_s3.options, "aws_endpoint": value}, tmp_path)
    assert isinstance(got.error, InvalidEndpointError) and isinstance(got.error, ValueError)
    assert (got.error.setting, got.error.value, got.error.reason) == (
        "storage.aws_endpoint", value, reason
    )  # fmt: skip
    assert str(got.error).startswith(f"storage.aws_endpoint {value!r} is not an endpoint URL")


def test_a_malformed_endpoint_from_the_environment_or_another_key_is_named_as_given(
    moto_s3: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {k: v for k, v in moto_s3.options.items() if k != "aws_endpoint"}
    monkeypatch.setenv("AWS_ENDPOINT", moto_s3.endpoint.removeprefix("http://"))
    got = fail("sink", root(moto_s3), options, tmp_path)
    assert isinstance(got.error, InvalidEndpointError) and got.error.setting == "AWS_ENDPOINT"
    monkeypatch.delenv("AWS_ENDPOINT")
    got = fail("source", root(moto_s3), {**options, "storage.endpoint_url": "s3.local"}, tmp_path)
    assert got.error.setting == "storage.endpoint_url"
    bad_metadata = {**moto_s3.options, "aws_metadata_endpoint": "169.254.169.254"}
    got = fail("sink", root(moto_s3), bad_metadata, tmp_path)
    assert got.error.setting == "storage.aws_metadata_endpoint"


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:9", "https://s3.eu-west-1.amazonaws.com", "http://[::1]:9000",
     "http://minio:9000/path/prefix", "http://proxyuser:hunter2@127.0.0.1:9"],
)  # fmt: skip
def test_a_well_formed_endpoint_is_accepted(endpoint: str) -> None:
    open_objects("s3://qbucket/p", {"aws_endpoint": endpoint, "aws_region": "us-east-1"})


class _S3Stub(ThreadingHTTPServer):
    """Answers every request with ``status``, ``headers`` and ``body``."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = answer

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def s3_stub() -> Iterator[Callable[[int, bytes, dict[str, str]], _S3Stub]]:
    made: list[_S3Stub] = []

    def make(status: int, body: bytes, headers: dict[str, str]) -> _S3Stub:
        made.append(_S3Stub(status, body, headers))
        return made[-1]

    yield make
    for server in made:
        server.shutdown()
        server.server_close()


REGIONAL_ANSWERS = {
    # a regional endpoint asked for a bucket of another region: no Location header
    "redirect": (301, b"<Error><Code>PermanentRedirect</Code><Message>The bucket you are "
                 b"attempting to access must be addressed using the specified endpoint."
                 b"</Message></Error>", {"x-amz-bucket-region": "eu-west-3"}, None),
    # the bucket's own endpoint asked with a signature for another region
    "malformed": (400, b"<Error><Code>AuthorizationHeaderMalformed</Code><Message>The "
                  b"authorization header is malformed; the region 'us-east-1' is wrong; "
                  b"expecting 'eu-west-3'</Message><Region>eu-west-3</Region></Error>", {},
                  "eu-west-3"),
}  # fmt: skip


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("answer", list(REGIONAL_ANSWERS))
def test_a_bucket_in_another_region_names_storage_aws_region(
    door: str,
    answer: str,
    s3_stub: Callable[[int, bytes, dict[str, str]], _S3Stub],
    tmp_path: Path,
) -> None:
    status, body, headers, expected = REGIONAL_ANSWERS[answer]
    stub = s3_stub(status, body, headers)
    options = {
        "aws_endpoint": stub.endpoint, "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET, "aws_region": "us-east-1", "allow_http": "true",
        "retry_timeout": "2s",
    }  # fmt: skip
    got = fail(door, f"s3://qbucket/{unique_prefix('region')}", options, tmp_path)
    assert isinstance(got.error, WrongRegionError)
    assert (got.error.region, got.error.expected, got.error.setting) == (
        "us-east-1", expected, "storage.aws_region"
    )  # fmt: skip
    assert str(got.error).startswith(
        "bucket 'qbucket' is not in region 'us-east-1' (set by storage.aws_region; "
    )
    assert got.seconds < 2 + SLACK_S


# -- what does not change, and the README ------------------------------------------------


def test_only_an_endpoint_that_did_not_answer_is_retried_as_transient() -> None:
    """A conditional write's read-back that found nothing answering is retried within
    the budget as before; a misconfiguration is not (sending it again cannot help)."""
    by_kind = {type(e): e for e, _, _ in ROWS}
    assert transient(by_kind[EndpointUnreachableError])
    assert not transient(by_kind[NoSuchBucketError])
    assert all(transient(e) == e.retryable for e, _, _ in ROWS)
    assert transient(OSError("503 Slow Down")) and transient(TimeoutError())


def test_the_readme_table_shows_each_error_s_own_first_line() -> None:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- errors:storage -->\n(.*?)\n<!-- /errors:storage -->", text, re.S)
    assert m, "README.md lacks the errors:storage block"
    assert m.group(1) == storage_errors_table(), (
        "README.md's table of storage errors differs from the errors' own messages; "
        "regenerate it with `python -m quiver_spark.objects.errors_doc`"
    )
    kinds = {type(e) for e, _, _ in ROWS}
    assert kinds == {c for c in _subclasses(StorageConfigError)}, "an error has no row"
    for err, _means, remedy in ROWS:
        assert "\n" not in first_line(err) and "|" not in first_line(err)
        assert f"`{err.setting}" in remedy or err.setting == "path", (err, remedy)


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out
