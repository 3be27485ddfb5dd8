"""README's table of what an object root configured wrong reports, generated from the
errors themselves (:class:`~quiver_spark.errors.StorageConfigError` and its subclasses,
raised by :func:`quiver_spark.objects.cloud.classify`).

Each row is an error built with example values, so the first line shown is the one its
class writes; ``python -m quiver_spark.objects.errors_doc`` prints the block, and
``tests/objects/test_a_misconfigured_object_root_fails_in_one_line_naming_what_to_set.py``
checks that README.md holds exactly this text between its ``<!-- errors:storage -->``
markers.
"""

from __future__ import annotations

from ..errors import (
    AccessDeniedError,
    EndpointUnreachableError,
    HttpNotAllowedError,
    InvalidEndpointError,
    NoCredentialsError,
    NoSuchBucketError,
    StorageConfigError,
    WrongRegionError,
)

ROOT = "s3://bucket/prefix"
"""The root every example names."""

ENDPOINT = "http://127.0.0.1:9000"

ROWS: tuple[tuple[StorageConfigError, str, str], ...] = (
    (
        NoCredentialsError(
            ROOT, metadata="http://169.254.169.254", answer="did not answer (connect timed out)"
        ),
        "no credentials anywhere the client looks: the storage options, the environment, "
        "then the instance metadata service (which answers only on a cloud VM)",
        "`storage.aws_access_key_id` and `storage.aws_secret_access_key` (or export "
        "`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`)",
    ),
    (
        NoCredentialsError(
            ROOT, given="storage.aws_access_key_id", missing="storage.aws_secret_access_key"
        ),
        "one half of a key pair is set",
        "the other half, here `storage.aws_secret_access_key`",
    ),
    (
        AccessDeniedError(
            ROOT, request="get STORE", status=403, code="AccessDenied", key_id="AKIA...MPLE"
        ),
        "the credentials are valid but may not make this request on this bucket and prefix",
        "the permissions named (IAM or bucket policy), or `storage.aws_access_key_id` and "
        "`storage.aws_secret_access_key` of a key that has them",
    ),
    (
        AccessDeniedError(
            ROOT, request="get STORE", status=403, code="InvalidAccessKeyId", key_id="AKIA...MPLE"
        ),
        "the storage knows no such access key id (a typo, a deleted key, a key of another "
        "account or endpoint)",
        "`storage.aws_access_key_id` and `storage.aws_secret_access_key`",
    ),
    (
        AccessDeniedError(
            ROOT,
            request="get STORE",
            status=403,
            code="SignatureDoesNotMatch",
            key_id="AKIA...MPLE",
        ),
        "the secret is not the access key's",
        "`storage.aws_secret_access_key`",
    ),
    (
        NoSuchBucketError(
            ROOT, bucket="bucket", endpoint=ENDPOINT, endpoint_setting="storage.aws_endpoint"
        ),
        "the bucket in the path does not exist at the endpoint asked (a reader says so too, "
        "never that the store has no writer yet)",
        "the bucket in `path` (or create it), or `storage.aws_endpoint`",
    ),
    (
        WrongRegionError(
            ROOT,
            bucket="bucket",
            region="us-east-1",
            region_from="set by storage.aws_region",
            expected="eu-west-1",
        ),
        "requests are signed for another region than the bucket's (the storage redirects "
        "them, or names the region it expects)",
        "`storage.aws_region`",
    ),
    (
        HttpNotAllowedError(ROOT, endpoint=ENDPOINT, setting="storage.aws_allow_http"),
        "the endpoint is plain `http://`, which the client refuses unless told",
        "`storage.aws_allow_http=true`, or an `https://` endpoint",
    ),
    (
        InvalidEndpointError(
            ROOT,
            setting="storage.aws_endpoint",
            value="127.0.0.1:9000",
            reason="it has no scheme (http:// or https://)",
        ),
        "the endpoint (an option, or `AWS_ENDPOINT` in the environment) is not a URL the "
        "client can use; refused before anything is contacted",
        "`storage.aws_endpoint` (or the environment variable named)",
    ),
    (
        EndpointUnreachableError(
            ROOT,
            endpoint=ENDPOINT,
            setting="storage.aws_endpoint",
            request="get STORE",
            reason="connection refused",
            attempts=24,
            seconds=49.6,
            budget_s=60,
        ),
        "nothing accepted a connection at the endpoint (wrong host or port, the storage "
        "down, a firewall); the call fails within `storage.retry_timeout`, and may succeed "
        "later (retryable; `quiver` exits 1, every other error here exits 2)",
        "`storage.aws_endpoint`, or a smaller `storage.retry_timeout` to fail sooner",
    ),
)
"""``(error, what it means, what to set)`` for each row of the table."""


def first_line(err: StorageConfigError) -> str:
    """What a user sees first: the class and its one-line message."""
    return f"{type(err).__name__}: {err}"


def storage_errors_table() -> str:
    """The markdown table README.md holds between its ``errors:storage`` markers."""
    rows = ["| what you see (first line) | what it means | what to set |", "|---|---|---|"]
    for err, means, remedy in ROWS:
        rows.append(f"| `{first_line(err)}` | {means} | {remedy} |")
    return "\n".join(rows)


def main() -> None:
    print(f"<!-- errors:storage -->\n{storage_errors_table()}\n<!-- /errors:storage -->")


if __name__ == "__main__":
    main()
