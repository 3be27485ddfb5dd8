"""A writer paused in the middle of a publication never loses or duplicates a committed
row (ARCHITECTURE.md §8.2, §11.3, §10.2), with real processes on an S3 root.

Writer Z of partition ``p-0`` commits transactions the way the Spark sink does (each
staged before its batch is decided) and starts sealing its open segment; one of its
requests, and every later one, is held at its fault proxy (a long GC pause, a network
partition): before the ``.arrow``, between the ``.arrow`` and the ``.meta``, before
the MANIFEST replace, or before the delete of a staged object. Writer S, another
machine with the same slot name and an empty ``wal.path``, takes the partition over
once Z's lease has gone unrenewed for its ttl, recovers and writes. Then Z's held
requests land late, and S finishes. A fresh reader finds every committed row exactly
once, the MANIFEST lists no segment whose data is missing, and Z is fenced
(``LeaseLostError``) instead of carrying on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.driven import ChildRaised, Driven
from tests.fault_proxy import FaultProxy, fault_proxies
from tests.moto_server import MotoS3, moto_s3, unique_prefix
from tests.paused_holders import (
    TAKE_OVER_WITHIN_S,
    bucket_ids,
    manifest_problems,
    processes,
    writer,
)

__all__ = ["fault_proxies", "moto_s3", "processes"]

HELD_AT = {
    "before its .arrow": ("PUT", r"/segments/p-0/\d{20}\.arrow$", None),
    "between its .arrow and its .meta": ("PUT", r"/segments/p-0/\d{20}\.meta$", None),
    "before its MANIFEST replace": ("PUT", r"/partitions/p-0/MANIFEST$", None),
    "before its staged delete": ("POST", r"\?delete", r"/partitions/p-0/txns/\d{20}\.txn<"),
}


def ids(lo: int, n: int) -> list[int]:
    return list(range(lo, lo + n))


CASES = [
    *((where, "published") for where in HELD_AT),
    # Z's late requests meet the successor's own publication half done
    ("before its .arrow", "between its .arrow and its .meta"),
    ("between its .arrow and its .meta", "between its .arrow and its .meta"),
]


@pytest.mark.parametrize(("where", "successor"), CASES)
def test_a_writer_paused_mid_publication_and_taken_over_loses_and_duplicates_no_committed_row(
    where: str,
    successor: str,
    tmp_path: Path,
    moto_s3: MotoS3,
    fault_proxies: Callable[[], FaultProxy],
    processes: Callable[[str], Driven],
) -> None:
    """Z is held ``where``; its requests land once the successor S has ``successor``."""
    root = f"{moto_s3.url}/{unique_prefix('paused-writer')}"
    pz, ps = fault_proxies(), fault_proxies()
    z, s = processes("writer Z"), processes("writer S")
    writer(z, root, pz, tmp_path / "wal-z")
    committed: list[int] = []

    assert z.run("txn(1, 0, 3)") is True
    assert z.run("seal()")  # seq 1: published, its staged object gone
    committed += ids(0, 3)
    assert z.run("txn(2, 3, 3)") is True
    assert z.run("txn(3, 6, 3)") is True
    committed += ids(3, 6)

    method, path, body = HELD_AT[where]
    rule = pz.add_rule(method=method, path=path, action="hold", hold_later=True, body=body)
    sealing = z.start("seal()")
    rule.wait_hit(30)
    assert not sealing.done(0.2), f"Z's seal went on past its held request:\n{pz.describe()}"

    writer(s, root, ps, tmp_path / "wal-s", within=TAKE_OVER_WITHIN_S)
    assert s.run("txn(10, 100, 3)") is True
    committed += ids(100, 3)
    if successor == "published":
        s.run("seal()")
    else:
        s_meta = ps.add_rule(method="PUT", path=HELD_AT[successor][1], action="hold")
        s_sealing = s.start("seal()")
        s_meta.wait_hit(30)

    pz.release()  # Z's requests land late, in the order it sent them
    sealed = sealing.outcome(30)
    if successor != "published":
        ps.release()
        s_sealed = s_sealing.outcome(30)
        assert not isinstance(s_sealed, ChildRaised), f"{s_sealed}\n{ps.describe()}"
    assert not isinstance(sealed, ChildRaised) or sealed.is_a("LeaseLostError"), sealed
    z_next = z.start("txn(12, 300, 3)").outcome(30)  # Z goes on as if nothing happened
    if z_next is True:
        committed += ids(300, 3)
    else:
        assert isinstance(z_next, ChildRaised) and z_next.is_a("LeaseLostError"), (
            f"Z's next transaction after its lease moved: {z_next}\n{pz.describe()}"
        )

    assert s.run("txn(11, 200, 3)") is True
    s.run("seal()")
    committed += ids(200, 3)
    s.run("store.close()")
    z.close()

    requests = f"Z's requests:\n{pz.describe()}\nS's requests:\n{ps.describe()}"
    assert manifest_problems(root, moto_s3) == [], requests
    found = bucket_ids(root, moto_s3)
    assert found == sorted(committed), (
        f"Z held {where}, S {successor}: missing {sorted(set(committed) - set(found))}, "
        f"duplicated {sorted({i for i in found if found.count(i) > 1})}, "
        f"never committed {sorted(set(found) - set(committed))}\n"
        f"Z's seal: {sealed!r}; Z's next transaction: {z_next!r}\n{requests}"
    )
