"""A mistaken ``quiver config PATH set`` says in one line what was wrong and what is
allowed: a near miss, an option that is not policy, a pair without ``=``."""

from __future__ import annotations

import subprocess
import sys

from .conftest import Built

POLICY_LIST = (
    "policy options: retention.size_cap, retention.size_cap_policy, retention.max_age, "
    "retention.steady_state_headroom, subscriber.expire_after"
)


def first_error(*args: object) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr
    return out.stderr.splitlines()[0]


def test_a_misspelled_policy_key_names_the_near_miss(built: Built) -> None:
    assert first_error("config", built.root, "set", "retention.sise_cap=2GB") == (
        "Error: unknown policy option 'retention.sise_cap' (did you mean "
        f"'retention.size_cap'?); {POLICY_LIST}"
    )


def test_a_writer_option_is_told_apart_from_policy(built: Built) -> None:
    assert first_error("config", built.root, "set", "wal.flush_interval=1s") == (
        "Error: wal.flush_interval is a writer option, not policy: pass it to the "
        f"sink/engine; {POLICY_LIST}"
    )


def test_a_location_is_told_apart_from_policy(built: Built) -> None:
    assert first_error("config", built.root, "set", "segment.path=/elsewhere") == (
        "Error: segment.path is a location, not policy: it is recorded in STORE when the "
        f"store is created and never changes; {POLICY_LIST}"
    )


def test_a_pair_without_equals_shows_what_was_given(built: Built) -> None:
    assert first_error("config", built.root, "set", "size_cap", "2GB") == (
        "Error: expected KEY=VALUE, got 'size_cap' '2GB' (did you mean "
        "retention.size_cap=2GB?); e.g. quiver config PATH set retention.size_cap=2GB"
    )


def test_fsck_help_names_the_partition_quarantine_directory() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", "fsck", "--help"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    text = " ".join(out.stdout.split())
    assert "<partition>/quarantine/" in text and "<pid>" not in text
