"""``quiver subscribers PATH list|add|remove``."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver_spark.subscribers import SubscriberRegistry

from .conftest import Built, run, run_json, tree, write_segments


def names(root: Path) -> list[str]:
    with SubscriberRegistry.open(str(root)) as reg:
        return reg.subscribers()


def test_add_list_and_remove_a_subscriber(built: Built) -> None:
    res = run(["subscribers", built.root, "add", "exporter-2"])
    assert res.exit_code == 0, res.stderr
    assert "added subscriber exporter-2" in res.stdout
    assert names(built.root) == ["exporter-2", "fast", "slow"]
    doc = run_json(["subscribers", built.root, "list"])
    assert doc["schema"] == "quiver.subscribers/1"
    new = next(s for s in doc["subscribers"] if s["name"] == "exporter-2")
    assert new["lag_segments"] == 6  # earliest: every retained segment is still to deliver
    listing = run(["subscribers", built.root, "list"]).stdout
    assert "exporter-2" in listing and "p-0:0, p-1:0" in listing
    res = run(["subscribers", built.root, "remove", "exporter-2"])
    assert res.exit_code == 0 and "removed subscriber exporter-2" in res.stdout
    assert names(built.root) == ["fast", "slow"]


def test_add_at_latest_starts_after_the_last_retained_segment(built: Built) -> None:
    doc = run_json(["subscribers", built.root, "add", "late", "--start", "latest"])
    assert doc == {"schema": "quiver.subscribers/1", "path": str(built.root), "action": "added",
                   "name": "late", "start": "latest", "marks": {"p-0": 3, "p-1": 3},
                   "reclaimed_before": None}  # fmt: skip
    status = run_json(["status", built.root])
    late = next(s for s in status["subscribers"] if s["name"] == "late")
    assert late["lag_segments"] == 0


def test_add_at_earliest_starts_before_the_first_retained_segment(built: Built) -> None:
    doc = run_json(["subscribers", built.root, "add", "early"])
    assert doc["start"] == "earliest" and doc["marks"] == {"p-0": 0, "p-1": 0}


def test_remove_reports_the_removal_as_json(built: Built) -> None:
    doc = run_json(["subscribers", built.root, "remove", "slow"])
    assert doc == {"schema": "quiver.subscribers/1", "path": str(built.root),
                   "action": "removed", "name": "slow"}  # fmt: skip
    assert names(built.root) == ["fast"]


def test_list_of_a_store_without_subscribers_says_so_and_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    write_segments(root, "p-0", 1)
    before = tree(root)
    res = run(["subscribers", root, "list"])
    assert res.exit_code == 0 and res.stdout.strip() == "no subscribers"
    assert run_json(["subscribers", root, "list"])["subscribers"] == []
    assert tree(root) == before and not (root / "subscribers").exists()


@pytest.mark.parametrize("bad", ["bad name", "a/b", "..", ".", "x" * 65, "", "ünï", "a;rm"])
def test_a_malformed_subscriber_name_is_refused_with_the_rule(built: Built, bad: str) -> None:
    before = tree(built.root)
    res = run(["subscribers", built.root, "add", bad])
    assert res.exit_code == 2
    assert f"invalid subscriber name {bad!r}" in res.stderr
    assert "1 to 64 characters from [A-Za-z0-9_.-]" in res.stderr
    assert tree(built.root) == before
    assert run(["subscribers", built.root, "remove", bad]).exit_code == 2


def test_a_name_of_64_characters_is_accepted(built: Built) -> None:
    assert run(["subscribers", built.root, "add", "a" * 64]).exit_code == 0


def test_adding_a_registered_name_exits_1_and_keeps_its_progress(built: Built) -> None:
    res = run(["subscribers", built.root, "add", "slow"])
    assert res.exit_code == 1
    assert "already registered" in res.stderr
    slow = next(s for s in run_json(["status", built.root])["subscribers"] if s["name"] == "slow")
    assert slow["partitions"][0]["hwm"] == 1


def test_removing_an_unknown_name_exits_1_and_lists_the_known_ones(built: Built) -> None:
    res = run(["subscribers", built.root, "remove", "ghost"])
    assert res.exit_code == 1
    assert "unknown subscriber 'ghost'" in res.stderr and "fast" in res.stderr


def test_add_and_remove_need_a_name_and_list_takes_none(built: Built) -> None:
    assert run(["subscribers", built.root, "add"]).exit_code == 2
    assert run(["subscribers", built.root, "remove"]).exit_code == 2
    res = run(["subscribers", built.root, "list", "extra"])
    assert res.exit_code == 2 and "takes no NAME" in res.stderr


def test_add_with_create_registers_on_a_new_store_and_without_it_refuses(tmp_path: Path) -> None:
    root = tmp_path / "new-store"
    res = run(["subscribers", root, "add", "exporter"])
    assert res.exit_code == 2 and "no such directory" in res.stderr and not root.exists()
    res = run(["subscribers", root, "add", "exporter", "--create"])
    assert res.exit_code == 0, res.stderr
    assert (root / "STORE").exists() and names(root) == ["exporter"]
    write_segments(root, "p-0", 2)  # the first writer finds the subscriber waiting
    status = run_json(["status", root])
    assert status["subscribers"][0]["lag_segments"] == 2


def test_create_refuses_a_directory_that_holds_something_else(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n")
    res = run(["subscribers", tmp_path, "add", "exporter", "--create"])
    assert res.exit_code == 2 and "is not a Quiver store" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]
    res = run(["subscribers", tmp_path, "list", "--create"])
    assert res.exit_code == 2 and "--create goes with 'add' only" in res.stderr
