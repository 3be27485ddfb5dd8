"""Every ``quiver`` command works on a store whose root is on an object store: run as
a real process against an S3 endpoint (moto), with ``-S KEY=VALUE`` storage options,
it shows the store's content, and on a machine that is not the writer's it says in
one line what it cannot see (the writers' WAL) instead of failing. No value of a
secret storage option (nor the access key id) appears in any output, and a missing
STORE object or a mistyped option is one line naming what was wrong, as is a root
configured wrong (no credentials, no such bucket, plain http not allowed, a malformed
endpoint: exit 2; an endpoint nothing answers at: exit 1, within storage.retry_timeout).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quiver_spark import QuiverStore, SegmentConfig, StoreConfig, WalConfig
from quiver_spark.objects import open_objects
from quiver_spark.subscribers import Outcome
from tests.moto_server import ACCESS_KEY_ID, SECRET, MotoS3, moto_s3, unique_prefix

from .conftest import REPO, batch

__all__ = ["moto_s3"]

SECRETS = (SECRET, ACCESS_KEY_ID)


@dataclass
class Remote:
    url: str
    options: dict[str, object]
    home: Path
    """XDG_CACHE_HOME of the commands: a machine other than the writer's (no WAL)."""

    def flags(self) -> list[str]:
        return [f for k, v in self.options.items() for f in ("-S", f"{k}={v}")]


@dataclass
class Ran:
    code: int
    out: str
    err: str


outputs: list[Ran] = []  # every run of this module, for the secret check


def quiver(
    remote: Remote, *args: object, path: str | None = None, aws_environment: bool = True
) -> Ran:
    """``python -m quiver_spark.cli CMD PATH ARGS -S ...`` as a new process (without this
    environment's ``AWS_*`` variables unless ``aws_environment``)."""
    cmd, *rest = [str(a) for a in args]
    argv = [sys.executable, "-m", "quiver_spark.cli", cmd, path or remote.url, *rest]
    base = {k: v for k, v in os.environ.items() if aws_environment or not k.startswith("AWS_")}
    env = {**base, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(remote.home)}
    done = subprocess.run(
        [*argv, *remote.flags()], capture_output=True, text=True, timeout=120, env=env,
        check=False, cwd=remote.home,
    )  # fmt: skip
    ran = Ran(done.returncode, done.stdout, done.stderr)
    outputs.append(ran)
    return ran


def ok(ran: Ran) -> str:
    assert ran.code == 0, ran.out + ran.err
    assert "Traceback" not in ran.err
    return ran.out


def as_json(ran: Ran, code: int = 0) -> dict[str, Any]:
    assert ran.code == code, ran.out + ran.err
    doc: dict[str, Any] = json.loads(ran.out)
    return doc


def build(s3: MotoS3, tmp: Path) -> Remote:
    """p-0 with 3 segments (one by a transaction), p-1 with 2; subscriber ``a``
    acknowledged p-0 segment 1 after every write (nothing reclaimed yet)."""
    url = f"{s3.url}/{unique_prefix('cli')}"
    cfg = StoreConfig(
        segment=SegmentConfig(max_open_duration_s=600), wal=WalConfig(path=str(tmp / "wal"))
    )
    opts = s3.options
    with QuiverStore.open(url, cfg, partition=None, storage_options=opts) as s:
        s.subscribers.register("a")
    with QuiverStore.open(url, cfg, partition="p-0", background=False, storage_options=opts) as s:
        for i in range(2):
            s.append(batch(i * 10, 10))
            s.finalize()
        txn = s.begin_txn("q", 0)
        s.append(batch(100, 5), txn_id=txn)
        s.flush()
        s.commit_txn("q", 0, [("p-0", txn)], 5)
        s.finalize()
    with QuiverStore.open(url, cfg, partition="p-1", background=False, storage_options=opts) as s:
        for i in range(2):
            s.append(batch(200 + i * 10, 10))
            s.finalize()
    with QuiverStore.open(url, cfg, partition=None, storage_options=opts) as s:
        s.subscribers.record("a", "p-0", [1], Outcome.ACK)  # no retention pass
    home = tmp / "elsewhere"
    home.mkdir()
    return Remote(url, dict(opts), home)


@pytest.fixture(scope="module")
def remote(moto_s3: MotoS3, tmp_path_factory: pytest.TempPathFactory) -> Remote:
    return build(moto_s3, tmp_path_factory.mktemp("objroot"))


def test_status_shows_partitions_and_subscribers_and_says_the_wal_is_elsewhere(
    remote: Remote,
) -> None:
    text = ok(quiver(remote, "status"))
    assert remote.url in text
    assert "writers on other machines keep their WAL" in text
    debug = quiver(remote, "status", "-vv")  # logs too: checked for secrets at the end
    assert debug.code == 0 and " INFO quiver_spark." in debug.err, debug.err[-2000:]
    doc = as_json(quiver(remote, "status", "--json"))
    assert {p["partition"]: p["segments"] for p in doc["partitions"]} == {"p-0": 3, "p-1": 2}
    assert {p["partition"]: p["rows"] for p in doc["partitions"]} == {"p-0": 25, "p-1": 20}
    assert doc["segments_url"] == f"{remote.url}/segments"
    [sub] = doc["subscribers"]
    assert sub["name"] == "a"
    assert {r["partition"]: r["hwm"] for r in sub["partitions"]}["p-0"] == 1
    assert sub["lag_segments"] == 4


def test_fsck_checks_every_object_and_finds_the_store_healthy(remote: Remote) -> None:
    text = ok(quiver(remote, "fsck"))
    assert "healthy: 0 problem(s), 0 warning(s)" in text
    assert "note: lease:" in text and "note: wal:" in text
    doc = as_json(quiver(remote, "fsck", "--json"))
    assert doc["healthy"] is True
    c = doc["checked"]
    assert (c["segments"], c["manifests"], c["commits"], c["leases"]) == (5, 2, 1, 2)
    assert c["subscriber_files"] >= 1  # the ack-log deltas


def test_fsck_names_a_damaged_manifest_in_the_bucket(moto_s3: MotoS3, tmp_path: Path) -> None:
    remote = build(moto_s3, tmp_path)
    objects = open_objects(remote.url, remote.options)
    got = objects.get("partitions/p-1/MANIFEST")
    assert got is not None
    data = bytearray(got.data)
    data[20] ^= 0xFF
    objects.put("partitions/p-1/MANIFEST", bytes(data))
    doc = as_json(quiver(remote, "fsck", "--json"), code=1)
    assert [(f["kind"], f["file"]) for f in doc["problems"]] == [
        ("manifest", f"{remote.url}/partitions/p-1/MANIFEST")
    ]
    text = quiver(remote, "fsck")
    assert text.code == 1 and "PROBLEM manifest:" in text.out


def test_subscribers_are_listed_added_and_removed(remote: Remote) -> None:
    assert ok(quiver(remote, "subscribers", "list")).splitlines()[2].startswith("a ")
    assert "added subscriber b" in ok(quiver(remote, "subscribers", "add", "b"))
    doc = as_json(quiver(remote, "subscribers", "list", "--json"))
    assert sorted(s["name"] for s in doc["subscribers"]) == ["a", "b"]
    assert "removed subscriber b" in ok(quiver(remote, "subscribers", "remove", "b"))
    doc = as_json(quiver(remote, "subscribers", "list", "--json"))
    assert [s["name"] for s in doc["subscribers"]] == ["a"]


def test_subscribers_add_create_makes_a_store_in_an_empty_prefix(
    remote: Remote, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('new')}"
    out = ok(quiver(remote, "subscribers", "add", "first", "--create", path=url))
    assert "added subscriber first" in out
    doc = as_json(quiver(remote, "status", "--json", path=url))
    assert [s["name"] for s in doc["subscribers"]] == ["first"] and doc["partitions"] == []


def test_txns_list_shows_none_pending_and_says_what_it_cannot_see(remote: Remote) -> None:
    ran = quiver(remote, "txns", "list")
    assert ok(ran).strip() == "no pending transactions"
    assert ran.err.count("\n") == 1 and "other machines keep theirs" in ran.err
    doc = as_json(quiver(remote, "txns", "list", "--json"))
    assert doc["pending"] == [] and "other machines" in doc["note"]
    refused = quiver(remote, "txns", "discard", "nosuch", "--yes")
    assert refused.code == 1 and "unknown query id 'nosuch'" in refused.err


def test_config_show_set_and_repair_from_the_copy(moto_s3: MotoS3, tmp_path: Path) -> None:
    remote = build(moto_s3, tmp_path)
    assert "retention.max_age                none" in ok(quiver(remote, "config", "show"))
    changed = ok(quiver(remote, "config", "set", "retention.max_age=1d"))
    assert (
        "retention.max_age                1d" in changed and "changed: retention.max_age" in changed
    )
    objects = open_objects(remote.url, remote.options)
    got = objects.get("POLICY")
    assert got is not None
    objects.put("POLICY", got.data[:-3])
    damaged = quiver(remote, "status")
    assert damaged.code == 0 and "warning: POLICY cannot be read" in damaged.err
    ok(quiver(remote, "config", "repair", "--from-last-good"))
    doc = as_json(quiver(remote, "config", "show", "--json"))
    assert doc["policy"]["retention.max_age"] == "1d"


def test_gc_dry_run_then_gc_reclaims_what_every_subscriber_acknowledged(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    remote = build(moto_s3, tmp_path)
    dry = ok(quiver(remote, "gc", "--dry-run"))
    assert "dry run: nothing changed" in dry and "p-0" in dry
    assert as_json(quiver(remote, "status", "--json"))["totals"]["segments"] == 5
    objects = open_objects(remote.url, remote.options)
    assert objects.get("metrics/gc.prom") is None  # a dry run writes nothing
    ok(quiver(remote, "gc"))
    ok(quiver(remote, "gc", "--full"))
    doc = as_json(quiver(remote, "status", "--json"))
    assert {p["partition"]: p["first_seq"] for p in doc["partitions"]} == {"p-0": 2, "p-1": 1}
    # gc's own counters are continued in the bucket, as on a POSIX root
    got = objects.get("metrics/gc.prom")
    assert got is not None and b"quiver_" in got.data


def test_metrics_show_the_store_series_and_every_process_file(remote: Remote) -> None:
    text = ok(quiver(remote, "metrics"))
    assert 'quiver_partition_segments{partition="p-0"} 3.0' in text
    assert 'quiver_subscriber_lag_segments{subscriber="a"} 4.0' in text
    every = ok(quiver(remote, "metrics", "--all"))
    for pid in ("p-0", "p-1"):  # read from each writer's metrics/writer-<pid>.prom object
        series = f'quiver_writer_heartbeat_timestamp_seconds{{partition="{pid}"}}'
        assert series in every and series not in text
    doc = as_json(quiver(remote, "metrics", "--json"))
    assert any(f["name"] == "quiver_store_bytes" for f in doc["families"])


def test_a_prefix_without_a_store_object_is_one_line_not_a_quiver_store(
    remote: Remote, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix('empty')}"
    for cmd in (["status"], ["fsck"], ["gc"], ["metrics"], ["config", "show"]):
        ran = quiver(remote, *cmd, path=url)
        assert ran.code == 2, (cmd, ran.out, ran.err)
        assert ran.err.count("\n") == 1 and "not a Quiver store" in ran.err, (cmd, ran.err)
        assert "subscribers PATH add NAME --create" in ran.err, ran.err  # how one is made
        assert ran.out == ""


def test_a_mistyped_storage_option_is_one_line_naming_the_near_miss(remote: Remote) -> None:
    bad = Remote(remote.url, {**remote.options, "aws_endpont": "http://x"}, remote.home)
    ran = quiver(bad, "status")
    assert ran.code == 2 and ran.out == ""
    assert ran.err.count("\n") == 1, ran.err
    assert "aws_endpont" in ran.err and "did you mean 'aws_endpoint'" in ran.err
    assert "unknown storage option 'aws_endpont'" in ran.err  # not an engine parameter's name
    assert "-S aws_endpont=" in ran.err and "storage.aws_endpont" in ran.err
    assert "http://x" not in ran.err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MISCONFIGURED = {
    # case: (options changed (None: removed), bucket, exit code, what the line says)
    "no credentials": (
        {"aws_access_key_id": None, "aws_secret_access_key": None, "retry_timeout": "1s",
         "aws_metadata_endpoint": "http://127.0.0.1:{closed}"},
        None, 2, "set storage.aws_access_key_id and storage.aws_secret_access_key",
    ),
    "no such bucket": ({}, "nosuchbucket", 2, "bucket 'nosuchbucket' does not exist at http://"),
    "nothing answers": (
        {"aws_endpoint": "http://127.0.0.1:{closed}", "retry_timeout": "2s"},
        None, 1, "nothing answered at http://127.0.0.1:",
    ),
    "plain http not allowed": (
        {"allow_http": None}, None, 2, "set storage.aws_allow_http=true, or use an https://"
    ),
    "endpoint without a scheme": (
        {"aws_endpoint": "127.0.0.1:{closed}"}, None, 2,
        "storage.aws_endpoint '127.0.0.1:",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISCONFIGURED))
def test_a_misconfigured_root_is_one_line_naming_what_to_set(
    case: str, remote: Remote, moto_s3: MotoS3
) -> None:
    changes, bucket, code, says = MISCONFIGURED[case]
    closed = _closed_port()
    options = dict(remote.options)
    for k, v in changes.items():
        if v is None:
            options.pop(k)
        else:
            options[k] = str(v).format(closed=closed)
    path = remote.url if bucket is None else remote.url.replace(moto_s3.url, f"s3://{bucket}")
    ran = quiver(Remote(path, options, remote.home), "status", path=path, aws_environment=False)
    assert ran.code == code and ran.out == "", (ran.code, ran.out, ran.err)
    assert ran.err.count("\n") == 1 and ran.err.startswith("Error: "), ran.err
    assert says in ran.err, ran.err
    assert "Traceback" not in ran.err and "panicked" not in ran.err


def test_a_storage_failure_without_a_secret_option_is_one_line_too(remote: Remote) -> None:
    """An endpoint that accepts connections and never answers: the command ends with
    one line naming it, without a traceback, also when no secret option made it hide
    secrets."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # accepted by the kernel, never answered
        options = {
            "aws_endpoint": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "aws_region": "us-east-1", "allow_http": "true", "aws_skip_signature": "true",
            "timeout": "300ms", "retry_timeout": "1s",
        }  # fmt: skip
        ran = quiver(Remote(remote.url, options, remote.home), "status", aws_environment=False)
    assert ran.code == 1 and ran.out == "", (ran.code, ran.err)
    assert ran.err.count("\n") == 1, ran.err
    assert ran.err.startswith("Error: nothing answered at http://127.0.0.1:"), ran.err


def test_a_storage_option_is_taken_as_the_messages_spell_it(remote: Remote) -> None:
    spelled = {k: v for k, v in remote.options.items() if k != "allow_http"}
    spelled["storage.aws_allow_http"] = "true"
    ok(quiver(Remote(remote.url, spelled, remote.home), "status"))


def test_a_secret_in_the_path_is_hidden_in_errors_and_output(
    remote: Remote, moto_s3: MotoS3
) -> None:
    url = f"{moto_s3.url}/{unique_prefix()}-{SECRET}"
    ran = quiver(remote, "status", path=url)
    assert ran.code == 2 and "not a Quiver store" in ran.err
    assert SECRET not in ran.err and "***" in ran.err
    ok(quiver(remote, "subscribers", "add", "s", "--create", path=url))
    for args in (["status"], ["status", "--json"], ["fsck", "--json"]):
        shown = quiver(remote, *args, path=url)
        assert shown.code == 0 and "-***" in shown.out, shown


def test_no_secret_storage_option_appears_in_any_output_of_this_module() -> None:
    """Runs last in this module: every command above passed the secret and key id."""
    assert len(outputs) >= 30
    for ran in outputs:
        for secret in SECRETS:
            assert secret not in ran.out and secret not in ran.err, (secret, ran)
