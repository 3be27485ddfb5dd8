"""Exploring the state space is the test: random operation sequences over the public
engine API, with faults, crashes, lost directories and damage, checked against a model
after every reopen (the model and its invariants: ``tests/engine/state_model.py``; the
state machine, one for every kind of root: ``tests/engine/state_space_machine.py``, its
rules of the file layer drawn on this root; the walks, profiles and figures:
``tests/engine/state_space_walks.py``).

Two writers (partitions ``p-0`` and ``p-1``, separate store handles), a driver
handle deciding transactions of two queries, two subscribers, retention under the
store's size-cap policy and time retention, ``quiver gc`` and ``quiver fsck
--quarantine``. Batch and transaction sizes straddle ``segment.target_size`` and
``wal.max_size``; schemas vary in nullability, metadata, dictionary encoding, an extra
column and an incompatible type. Faults: kill, power loss (every crash state kind of
:class:`~tests.faults.CrashSimulator`), EIO/ENOSPC on a chosen operation (optionally
torn), loss of ``wal.path``, a flipped byte in every kind of file. Segments live in the
store or on an fsspec location (``faultmem://``) whose requests fail like local I/O.

An injected I/O fault has two halves. Fault-and-crash: the process dies, everything is
reopened and checked. Fault-and-continue: the error surfaces to the caller, which
retries the same call or goes on with other work (an ENOSPC may stay for a few calls,
then the disk frees up); once the fault cleared, every surviving handle must work again
within :data:`~tests.engine.state_model.RETRIES` calls and a live reader in the same
process must see every acknowledged row once and nothing undecided (the live check);
the next reopen must agree with what the live reader saw. Targeted rules arm a fault on
the next operation of one (operation, file kind) pair and do the work that reaches it
(a WAL replayed by a new writer, a live consumer polling, reading and acknowledging, a
torn WAL or ack-log tail for recovery to cut, a subscriber that leaves and registers
again, a damaged segment for ``quiver fsck --quarantine`` to move aside, a store being
created); each sequence walks the pairs of ``POSIX_PAIRS``.

Besides the random sequences, two deterministic walks run in every profile: every known
pair has its fault fire once in each half on a store with history (and the test fails
naming any pair that did not fire: a pair the workload stopped meeting), and one file
of every kind of ARCHITECTURE.md §22 has a byte flipped (segments and the quarantine
mark also on the remote location, the readers' lost log by name). Relaxations for
defects being fixed elsewhere are all in :data:`~tests.engine.state_model.PENDING_FIXES`.

Profiles: the CI one runs by default (200 sequences of 40 steps and the walks, about
1.5 minutes on a loaded 2-core machine); ``QUIVER_SOAK=1`` (``make soak``) runs the
long one (400 random sequences of 80 steps) under the ``soak`` marker. The figures of the run
(sequences x steps, faults fired per (operation, file kind) continued/crashed, pairs
never fired, live and reopen checks per rule, byte flips per kind, relaxations used) are
printed at the end of the module. Shrunk failures live on as ``test_state_space_regressions.py``.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.engine import state_model as sm
from tests.engine import state_space_walks as walks
from tests.engine.state_space_machine import StoreStateSpace


@pytest.fixture(scope="module", autouse=True)
def state_space_report(request: pytest.FixtureRequest):
    yield from walks.report(
        request, "state space", "QUIVER_STATE_SPACE_REPORT", walks.posix_figures
    )


def test_every_file_kind_is_flipped_in_the_walk():
    """Damage to one file of every kind is contained: the store opens (or refuses the
    damaged partition naming the file) and everything undamaged reads and writes."""
    assert walks.walk_every_flip() == []


def test_every_known_pair_fires_in_the_walk():
    """Each (operation, file kind) the workload performs has its fault fire, once with
    the process going on and once with it dying, and every invariant holds after it."""
    missed = walks.walk_every_pair()
    assert missed == {"continued": [], "crashed": []}, missed


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_every_known_pair_fires_in_every_store_shape_soak():
    """The walk over six store shapes per pair and half (layouts, policies, flush
    modes, local and remote segments, EIO and ENOSPC, torn writes)."""
    missed = walks.walk_every_pair(shapes=6)
    assert missed == {"continued": [], "crashed": []}, missed


def _segments(h: sm.StoreHarness, p: str, n: int) -> None:
    for _ in range(n):
        h.append(p, "base", 7)
        h.flush(p)
        h.finalize(p)


def test_live_consumers_go_through_every_catch_up_state_of_the_model(tmp_path):
    """The states the ``catch_up`` rule draws, in one sequence the model checks: newest
    first opens a backlog under the head, a batch serves the head and the backfill
    together, a consumer switched to oldest first drains the backlog and the rest, and
    every live consumer is checked against the ack log (nothing read twice, nothing
    skipped once it found nothing left) and the store after a reopen."""
    before = Counter(sm.STATS)
    h = sm.StoreHarness(str(tmp_path))
    try:
        h.register("s1")
        _segments(h, "p-0", 8)
        h.consume_live("s1", 1, "newest", None, 2)  # the newest two; backlog 1..6
        _segments(h, "p-0", 2)
        # head 9 and the backfill's 6 (or, while the handle's view of p-0 taken by the
        # last retention pass is reused, the backfill's 6 and 5 first: 9 is seen next)
        h.consume_live("s1", 2, "newest", 0.5, 2)
        h.consume_live("s1", 6, "oldest", None, 1)  # the rest of the backlog, 10, nothing
        h.kill_all()
        h.recover_and_check()
        reg = h._fresh_registry()
        assert all(reg.is_done("s1", *key) for key in h._listing_quiet())
    finally:
        h.close()
    seen = Counter(sm.STATS)
    seen.subtract(before)
    for state in (
        "catch_up:backlog_opened",
        "catch_up:head_and_backfill_in_one_batch",
        "catch_up:switch_with_a_backlog:newest->oldest",
        "catch_up:drained_checks",
    ):
        assert seen[state] >= 1, (state, {k: n for k, n in seen.items() if "catch_up" in k})


def test_state_space_ci_profile():
    """The short profile: deterministic sequences, no example database."""
    walks.run_profile(StoreStateSpace, "ci")


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_state_space_soak_profile():
    """The long profile (``make soak``): random sequences, failures saved in a tmp database."""
    db = os.environ.get("QUIVER_STATE_SPACE_DB") or os.path.join(
        tempfile.gettempdir(), "quiver-state-space-db"
    )
    walks.run_profile(StoreStateSpace, "soak", database=DirectoryBasedExampleDatabase(db))
