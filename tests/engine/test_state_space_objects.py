"""The state-space test with the store's root on an object store (the in-process
``memory://`` one): the same state machine (``tests/engine/state_space_machine.py``)
and the same model (``tests/engine/state_model.py``) as ``test_state_space.py``, drawing
the rules an object root has instead of those of the file layer; the WAL on local disk
(``wal.path``), every other object in the bucket.

Faults are object requests (``MemoryObjects.faults``): one that fails before it
happens (an ``OSError``; a 409 ``ObjectConflict``), one that succeeded and whose
response was lost (raised after it), and a stale listing (answered from the bucket as
it was when the fault was armed). Each has the two halves of the POSIX test: the
process goes on (the error surfaces, the caller retries or does other work; once the
fault cleared every handle works again and a live reader sees every acknowledged row
once), or the process dies. A killed process, and a power loss, abandon their handles:
the bucket keeps what each request did, the leases are not released, and a new handle
(a new ``QuiverStore.open`` on the same URL) recovers everything committed. The
invariants are the POSIX ones: no acknowledged row lost, none duplicated, nothing
undecided visible, nothing a subscriber still needs deleted.

Transactions are staged as the Spark sink stages them (ARCHITECTURE.md §10.2): after a
successful flush each durable transaction of that writer not staged yet is written to
the bucket with ``stage_txn`` (faults apply to it as to any request); only staged
transactions are reported, so only they win; one whose staging failed is a failed
task. A machine is lost (``lose_machine``): its writer dies and its local disk (WAL,
STATE, LOCK) goes, its LEASE left held by a host nobody here knows; the partition's
next writer, refused until the lease was seen unchanged for its ttl, or an observer's
``finalize_idle_partitions`` while no writer of it is open (checked right after its
pass), seals every committed staged row exactly once; undecided staged transactions
stay candidates; what only the WAL held is lost (never-staged transactions discarded,
rows outside transactions maybe). A damaged staged object is harmless while its writer
lives; with its machine lost it loses exactly its transaction's rows, named in the log,
an observer's ``idle_failures`` and fsck.

Lease holders cut off from the storage (``late_holders.py``): a rule holds a writer,
an observer sealing for a lost machine, a live consumer, a retention pass or the
driver's commit at its next request of one kind (each sequence walks the (request
kind, role) pairs), while a successor on another machine takes its lease over and
works, then delivers its requests late; another does the same with the holder's
machine suspended mid-request (its boot-time clock jumps past the lease ttl); a third
puts consumers and retention passes on machines whose wall clocks are hours off,
under a policy that expires idle subscribers. The report counts the holds per
(request kind, role), partitioned and suspended.

Four deterministic walks run in every profile: every (request kind, role) of a holder
is held once (partitioned and suspended, before and after the request in turn; the
test fails naming a pair that never fired); every skew role runs once ahead and once
behind; every known (request, object kind) pair has a fault fire, cycling through the
fault kinds and the two halves so that every fault kind fires in each half (the test
fails naming a pair or a fault kind that never fired); and one object of every kind in
``OBJECT_FLIP_KINDS`` has a byte flipped, with the outcome
:data:`~tests.engine.state_model.OBJECT_FLIP_OUTCOMES` states for it.

Profiles: the CI one by default (60 sequences of 30 steps and the walks, under a minute
on a loaded 2-core machine); ``QUIVER_SOAK=1`` (``make soak``) runs 300 random sequences
of 60 steps under the ``soak`` marker (``QUIVER_OBJECT_STATE_SPACE_EXAMPLES`` and
``..._STEPS`` override either).
"""

from __future__ import annotations

import pytest

from tests.engine import late_holders as lh
from tests.engine import state_model as sm
from tests.engine import state_space_walks as walks
from tests.engine.state_space_machine import ObjectStateSpace


@pytest.fixture(scope="module", autouse=True)
def object_state_space_report(request: pytest.FixtureRequest):
    yield from walks.report(
        request, "object state space", "QUIVER_OBJECT_STATE_SPACE_REPORT", walks.object_figures
    )


def test_every_object_kind_is_flipped_with_its_stated_outcome():
    """Damage to one object of every kind has the outcome OBJECT_FLIP_OUTCOMES states:
    refused naming the object, or recovered/fallen back, and every invariant holds."""
    seen = walks.walk_every_object_flip()
    assert "missing" not in seen.values(), seen
    for kind, outcome in sm.OBJECT_FLIP_OUTCOMES.items():
        assert seen[kind] in walks.expected_flip_outcomes(outcome), (kind, seen[kind], outcome)


def test_every_object_fault_kind_fires_in_the_walk():
    """Each (request, object kind) the workload makes has a fault fire, and each fault
    kind (failed, 409, lost response, stale listing) fires with the process going on and
    with it dying, every invariant holding after it."""
    missed = walks.walk_every_object_pair()
    assert missed == {"pairs": [], "kinds": []}, missed


def test_every_held_request_kind_fires_for_every_role():
    """Each (request kind, role) of a lease holder, an observer sealing for a lost
    machine, a live consumer, a retention pass and the driver's commit is held while
    others go on (partitioned, and suspended: every role both ways), then delivered
    late; the late holder is refused or harmless and every invariant holds."""
    missed = lh.walk_every_held_pair(walks.warmed_up(ObjectStateSpace))
    assert missed == {"pairs": [], "modes": []}, missed


def test_machines_with_skewed_wall_clocks_expire_no_active_subscriber():
    """Consumers and retention passes (``run_retention``, ``quiver gc``) on machines
    hours ahead or behind, under a policy that expires idle subscribers: nobody
    acknowledging or live is expired."""
    assert lh.walk_every_skew(walks.warmed_up(ObjectStateSpace)) == []


def test_object_state_space_ci_profile():
    """The short profile on an object root: deterministic sequences, no database."""
    walks.run_profile(ObjectStateSpace, "ci")


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_object_state_space_soak_profile():
    """The long profile (``make soak``): random sequences on an object root."""
    walks.run_profile(ObjectStateSpace, "soak")
