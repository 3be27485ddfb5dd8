"""A writer on an object root whose requests about a new segment's ``.arrow`` fail a
few times in a row (here: listings of that key; its size is read by a HEAD, never from
a listing, which may lag or fail as absent), the process going on, keeps every
acknowledged row: once the listing answers again, the same handle seals them and a live
reader sees each once (the rule of RELIABILITY.md: a failed request is not a crash)."""

from __future__ import annotations

from tests.engine.state_space_machine import ObjectStateSpace


def test_rows_survive_a_failed_listing_of_the_arrow_during_publication(tmp_path):
    state = ObjectStateSpace()
    try:
        state.start(flush="group", policy=None, time_retention=False, first_pair=0)
        # the next three `list` requests of an .arrow key fail; the caller retries once
        # and goes on; then the fault clears
        state.object_fault(at=1, cont=3, mode=0, pair=("list", "arrow"), retries=1, sticky=3)
        state.a_swallowed_fault_still_ends_the_process()
        state.handles_work_again_once_a_fault_cleared()
        assert state.h is not None
        state.h.kill_all()
        state.h.recover_and_check()
    finally:
        state.teardown()
