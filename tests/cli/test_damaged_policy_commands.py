"""With a damaged POLICY every command goes on and names the file; fsck reports it and
``quiver config PATH repair`` rewrites it. Run as a user runs them: real processes."""

from __future__ import annotations

import subprocess
import sys

from quiver_spark.policy import POLICY_COPY_FILE, POLICY_FILE

from .conftest import Built, flip_byte


def quiver(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quiver_spark.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def first_err(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    return out.stderr.splitlines()[0] if out.stderr else ""


def test_every_command_goes_on_and_names_a_damaged_policy(built: Built) -> None:
    policy = built.root / POLICY_FILE
    flip_byte(policy, 20)
    warning = "warning: POLICY cannot be read: frame crc mismatch"
    for args in (("status",), ("gc",), ("subscribers", "list"), ("config",), ("txns", "list")):
        cmd, *rest = args
        out = quiver(cmd, built.root, *rest)
        assert out.returncode == 0, (args, out.stderr)
        first = first_err(out)
        assert first.startswith(warning) and f"{policy}:0" in first, (args, first)
        assert f"quiver config {built.root} repair --from-last-good" in first
    assert "DAMAGED" in quiver("status", built.root).stdout


def test_fsck_reports_a_damaged_policy_as_a_problem_naming_the_repair(built: Built) -> None:
    policy = built.root / POLICY_FILE
    flip_byte(policy, 20)
    out = quiver("fsck", built.root)
    assert out.returncode == 1
    lines = [line for line in out.stdout.splitlines() if line.startswith("PROBLEM")]
    assert len(lines) == 1
    assert lines[0].startswith(f"PROBLEM policy: {policy}:0: frame crc mismatch")
    assert f"quiver config {built.root} repair --from-last-good" in lines[0]


def test_set_is_refused_and_repair_from_the_last_good_copy_makes_fsck_healthy(
    built: Built,
) -> None:
    root = built.root
    assert quiver("config", root, "set", "retention.max_age=3d").returncode == 0
    flip_byte(root / POLICY_FILE, 20)
    refused = quiver("config", root, "set", "retention.max_age=5d")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith(
        "Error: cannot change a damaged policy (repair it with: "
        f"quiver config {root} repair --from-last-good"
    )
    fixed = quiver("config", root, "repair", "--from-last-good")
    assert fixed.returncode == 0, fixed.stderr
    assert f"repaired: {root}/POLICY (generation 3)" in fixed.stdout
    assert "retention.max_age                3d" in fixed.stdout
    assert quiver("fsck", root).returncode == 0
    again = quiver("config", root, "repair", "--from-last-good")
    assert again.returncode == 1
    assert first_err(again) == (
        f"Error: {root}/POLICY reads fine (generation 3) and so does its copy: nothing to "
        f"repair; change the policy with: quiver config {root} set KEY=VALUE ..."
    )


def test_a_missing_policy_is_repaired_from_explicit_values(built: Built) -> None:
    root = built.root
    (root / POLICY_FILE).unlink()
    (root / POLICY_COPY_FILE).write_bytes(b"garbage")
    fsck = quiver("fsck", root)
    assert fsck.returncode == 1
    assert f"PROBLEM policy: {root / POLICY_FILE}:0: missing" in fsck.stdout
    no_copy = quiver("config", root, "repair", "--from-last-good")
    assert no_copy.returncode == 1
    assert no_copy.stderr.splitlines()[-1] == (
        "Error: no last good policy to repair from (give every value with: "
        f"quiver config {root} repair KEY=VALUE ...): file truncated (7 bytes, header is "
        f"16) at {root / POLICY_COPY_FILE}:0"
    )
    fixed = quiver("config", root, "repair", "retention.size_cap=1GB")
    assert fixed.returncode == 0, fixed.stderr
    assert "retention.size_cap               1GB" in fixed.stdout
    assert quiver("fsck", root, "--strict").returncode == 0


def test_fsck_names_a_damaged_copy_and_bare_repair_rewrites_it(built: Built) -> None:
    root = built.root
    copy = root / POLICY_COPY_FILE
    flip_byte(copy, 20)
    fsck = quiver("fsck", root)
    assert fsck.returncode == 0  # only repair reads the copy: a warning
    assert f"WARNING policy_copy: {copy}:0: frame crc mismatch" in fsck.stdout
    assert f"rewrite it with: quiver config {root} repair" in fsck.stdout
    fixed = quiver("config", root, "repair")
    assert fixed.returncode == 0, fixed.stderr
    assert f"repaired: {copy} (generation 1)" in fixed.stdout
    assert quiver("fsck", root, "--strict").returncode == 0
