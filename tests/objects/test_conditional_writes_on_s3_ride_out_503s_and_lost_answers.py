"""A conditional write on an S3 root (commit record, acknowledgement, lease, manifest)
rides out a 503 SlowDown and a lost answer by itself, lands its bytes exactly once,
still reports a decided 412 as the failed condition it is, and fails only when a storm
outlasts the budget (storage option ``retry_timeout``), saying so. A fault proxy stands
between the store and the S3 server (moto): it answers 503 without forwarding, or
forwards and drops the answer."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from quiver_spark.errors import ObjectExists, RetriesExhausted, VersionMismatch
from quiver_spark.objects import ObjectStore, open_objects
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, s3_options, unique_prefix

__all__ = ["fault_proxies", "moto_s3"]

KEY = "commits/q/00000000000000000007.commit"


class Roots:
    """One root seen directly and through a fault proxy."""

    def __init__(self, moto: MotoS3, proxy: FaultProxy, **options: object) -> None:
        url = f"{moto.url}/{unique_prefix('retry')}"
        self.proxy = proxy
        self.direct = open_objects(url, moto.options)
        self.proxied = open_objects(url, s3_options(proxy.endpoint, **options))
        self.path = re.escape(f"{url.removeprefix('s3:/')}/{KEY}") + "$"

    def puts(self) -> list[tuple[int | None, bool]]:
        """(status, answered) of every PUT of the key that reached the proxy."""
        return [(s.status, s.answered) for s in self.proxy.requests("PUT", self.path)]


@pytest.fixture
def roots(moto_s3: MotoS3, fault_proxies: Callable[[], FaultProxy]) -> Roots:
    return Roots(moto_s3, fault_proxies())


def write(op: str, objects: ObjectStore, data: bytes, version: str | None) -> str:
    if op == "create":
        return objects.create(KEY, data)
    assert version is not None
    return objects.replace(KEY, data, version=version)


def prepare(op: str, roots: Roots) -> str | None:
    return roots.direct.create(KEY, b"before") if op == "replace" else None


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_503_is_retried_and_the_write_lands_once(roots: Roots, op: str) -> None:
    version = prepare(op, roots)
    roots.proxy.add_rule("PUT", roots.path, "503", times=2)
    written = write(op, roots.proxied, b"decision", version)
    got = roots.direct.get(KEY)
    assert got is not None and (got.data, got.version) == (b"decision", written)
    assert roots.puts() == [(503, True), (503, True), (200, True)], roots.proxy.describe()


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_write_whose_answer_was_lost_is_read_back_as_written_once(roots: Roots, op: str) -> None:
    version = prepare(op, roots)
    roots.proxy.add_rule("PUT", roots.path, "drop_response", times=1)
    written = write(op, roots.proxied, b"decision", version)
    got = roots.direct.get(KEY)
    assert got is not None and (got.data, got.version) == (b"decision", written)
    # landed once (answer lost), then the retry met its own write: 412, read back
    assert roots.puts() == [(200, False), (412, True)], roots.proxy.describe()
    assert roots.proxy.requests("GET", roots.path), "the outcome was not read back"


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_decided_412_is_still_the_failed_condition(roots: Roots, op: str) -> None:
    first = roots.direct.create(KEY, b"theirs")
    stale = first
    if op == "replace":
        roots.direct.replace(KEY, b"theirs again", version=first)
    with pytest.raises(ObjectExists if op == "create" else VersionMismatch):
        write(op, roots.proxied, b"decision", stale)
    assert roots.puts() == [(412, True)], roots.proxy.describe()


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_412_after_a_503_is_the_failed_condition_when_the_key_holds_other_bytes(
    roots: Roots, op: str
) -> None:
    first = roots.direct.create(KEY, b"theirs")
    if op == "replace":
        roots.direct.replace(KEY, b"theirs again", version=first)
    roots.proxy.add_rule("PUT", roots.path, "503", times=1)
    with pytest.raises(ObjectExists if op == "create" else VersionMismatch):
        write(op, roots.proxied, b"decision", first)
    assert roots.puts() == [(503, True), (412, True)], roots.proxy.describe()
    got = roots.direct.get(KEY)
    assert got is not None and got.data != b"decision"


@pytest.mark.parametrize("op", ["create", "replace"])
def test_a_503_storm_longer_than_the_budget_fails_naming_the_key_and_the_budget(
    moto_s3: MotoS3, fault_proxies: Callable[[], FaultProxy], op: str
) -> None:
    roots = Roots(moto_s3, fault_proxies(), retry_timeout="1s")
    version = prepare(op, roots)
    roots.proxy.add_rule("PUT", roots.path, "503", times=None)
    with pytest.raises(RetriesExhausted) as caught:
        write(op, roots.proxied, b"decision", version)
    message = str(caught.value)
    assert KEY in message and "1s (storage.retry_timeout)" in message and "503" in message
    assert len(roots.puts()) > 1 and all(p == (503, True) for p in roots.puts())
    got = roots.direct.get(KEY)
    assert (got.data if got else None) == (b"before" if op == "replace" else None)
