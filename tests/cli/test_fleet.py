"""``quiver status`` and ``subscribers list`` at fleet size: filters and totals that add up."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.subscribers import Outcome, SubscriberRegistry

from .conftest import kill_writer_after_append, run, run_json, write_segments

HOSTS = ("h1", "h2", "h3")
SLOTS = 8
SUBSCRIBERS = ("archiver", "exporter", "forwarder")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 hosts x 8 slots (one segment each) and 3 subscribers at different positions."""
    root = tmp_path_factory.mktemp("fleet") / "store"
    pids = [f"{h}-{k}" for h in HOSTS for k in range(SLOTS)]
    for pid in pids:
        write_segments(root, pid, 1, rows=10)
    with SubscriberRegistry.open(str(root)) as reg:
        for name in SUBSCRIBERS:
            reg.register(name)
        for pid in pids[:12]:
            reg.record("exporter", pid, [1], Outcome.ACK)
    kill_writer_after_append(root, "h3-7", rows=5)  # WAL bytes in one partition
    return root


def _disk_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def test_filtered_to_one_subscriber_the_status_is_short(fleet: Path) -> None:
    res = run(["status", fleet, "--subscriber", "exporter"])
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) <= 40, res.stdout
    assert not any(n in res.stdout for n in ("archiver", "forwarder"))
    sub_rows = [line for line in lines if line.startswith("exporter ")]
    assert len(sub_rows) == 24
    assert "Partitions: 24" in res.stdout and "--partition GLOB" in res.stdout

    one_host = run(["status", fleet, "--subscriber", "exp*", "--partition", "h2-*"])
    rows = [line for line in one_host.stdout.splitlines() if line.startswith("exporter ")]
    assert [r.split()[1] for r in rows] == [f"h2-{k}" for k in range(SLOTS)]
    parts = [line for line in one_host.stdout.splitlines() if line.startswith("h2-")]
    assert len(parts) == SLOTS  # partitions asked for are listed


def test_filters_repeat_and_narrow_the_json_document(fleet: Path) -> None:
    doc = run_json(["status", fleet, "--partition", "h1-0", "--partition", "h3-*",
                    "--subscriber", "archiver", "--subscriber", "forwarder"])  # fmt: skip
    assert doc["filters"] == {"partition": ["h1-0", "h3-*"],
                              "subscriber": ["archiver", "forwarder"]}  # fmt: skip
    pids = [p["partition"] for p in doc["partitions"]]
    assert pids == ["h1-0", *[f"h3-{k}" for k in range(SLOTS)]]
    assert [s["name"] for s in doc["subscribers"]] == ["archiver", "forwarder"]
    for s in doc["subscribers"]:
        assert [r["partition"] for r in s["partitions"]] == pids
    assert doc["totals"]["partitions"] == 9 and doc["totals"]["subscribers"] == 2


def test_every_byte_figure_adds_up(fleet: Path) -> None:
    for argv in ([], ["--partition", "h2-*", "--partition", "h3-7"]):
        doc = run_json(["status", fleet, *argv])
        rows, t = doc["partitions"], doc["totals"]
        for key in ("segments", "segment_bytes", "wal_bytes", "bytes"):
            assert t[key] == sum(p[key] for p in rows), key
        for p in rows:
            assert p["bytes"] == p["segment_bytes"] + p["wal_bytes"]
            on_disk = _disk_bytes(fleet / "segments" / p["partition"])
            assert p["segment_bytes"] == on_disk, ".arrow plus .meta, as on disk"
            wal = fleet / "partitions" / p["partition"] / "wal"
            assert p["wal_bytes"] == (_disk_bytes(wal) if wal.exists() else 0)
        for s in doc["subscribers"]:
            assert s["lag_bytes"] == sum(r["lag_bytes"] for r in s["partitions"])
            assert s["lag_segments"] == sum(r["lag_segments"] for r in s["partitions"])
        whole = _disk_bytes(fleet / "segments") + sum(
            _disk_bytes(w) for w in (fleet / "partitions").glob("*/wal")
        )
        assert t["store_bytes"] == whole
    full = run_json(["status", fleet])
    assert full["totals"]["bytes"] == full["totals"]["store_bytes"]
    archiver = next(s for s in full["subscribers"] if s["name"] == "archiver")
    assert archiver["lag_bytes"] == _disk_bytes(fleet / "segments"), "nothing acked: all of it"


def test_a_filter_that_matches_nothing_names_what_exists(fleet: Path) -> None:
    res = run(["status", fleet, "--subscriber", "exporterr"])
    assert res.exit_code == 2
    assert "no subscriber matches 'exporterr'" in res.stderr
    assert "archiver, exporter, forwarder" in res.stderr
    res = run(["status", fleet, "--partition", "h9-*"])
    assert res.exit_code == 2 and "no partition matches 'h9-*'" in res.stderr
    assert "h1-0" in res.stderr


def test_subscribers_list_takes_the_same_filters(fleet: Path) -> None:
    doc = run_json(["subscribers", fleet, "list", "--subscriber", "exporter",
                    "--partition", "h1-*"])  # fmt: skip
    (exporter,) = doc["subscribers"]
    assert [r["partition"] for r in exporter["partitions"]] == [f"h1-{k}" for k in range(SLOTS)]
    assert exporter["lag_segments"] == 0  # h1 is all acked
    human = run(["subscribers", fleet, "list", "--subscriber", "for*"])
    assert human.exit_code == 0 and "forwarder" in human.stdout
    assert "exporter" not in human.stdout and "archiver" not in human.stdout
    wrong = run(["subscribers", fleet, "add", "x", "--subscriber", "exporter"])
    assert wrong.exit_code == 2 and "'list' only" in wrong.stderr


def test_status_json_schema_documents_every_field(fleet: Path) -> None:
    import importlib

    doc = run_json(["status", fleet])
    documented = importlib.import_module("quiver_spark.cli.status").__doc__ or ""
    for key in [*doc, *doc["totals"], *doc["partitions"][0], *doc["subscribers"][0]]:
        assert f'"{key}"' in documented, key
    assert ".meta" in documented and "sum" in documented
