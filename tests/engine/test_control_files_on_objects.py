"""The store's control objects keep their guarantees on every root (ARCHITECTURE.md §2.3).

STORE, POLICY and its copy, commit records, subscription records and the metrics
files are written through the root's ObjectStore only, so the same code runs on a
POSIX directory (LocalObjects: fsync + link, flock + rename) and on an object store
(MemoryObjects here, with the preconditions S3/GCS/Azure offer). Every test runs on
both. Races are made deterministic by a hook that lets a second party (another
process, as far as the objects can tell: its own ObjectStore on the same root) write
just before the first one's conditional write. The guarantees:

- two first openers of one root run on one store (one descriptor);
- of two first writers, one records the schema and the other is judged against it;
- of two decisions of one batch exactly one is recorded, every committer is told
  which, and a committer's retry of its own decision gets its answer again, also
  when the response to its write was lost;
- a policy change is conditional on the version read: two changes from one reading
  with an expected generation cannot both succeed; without one, the loser is applied
  on top of the winner's; a damaged POLICY behaves as §7.2 says;
- a conditional write the storage refused with a 409 (nothing written) is retried.
"""

from __future__ import annotations

import errno
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from quiver_spark import format as fmt
from quiver_spark.commits import CommitLog
from quiver_spark.config import StoreConfig
from quiver_spark.descriptor import (
    STORE_KEY,
    ensure_schema,
    load_or_create_descriptor,
    read_descriptor,
    recorded_schema,
)
from quiver_spark.errors import (
    CorruptionError,
    ObjectConflict,
    PolicyConflictError,
    SchemaMismatchError,
)
from quiver_spark.fs import DEFAULT_IO
from quiver_spark.metrics import SOURCE_ACKED, Metrics, metrics_key
from quiver_spark.objects import ObjectInfo, ObjectStore, Stored
from quiver_spark.objects.local import LocalObjects
from quiver_spark.objects.memory import Faults, MemoryObjects
from quiver_spark.policy import (
    POLICY_COPY_FILE,
    POLICY_FILE,
    ensure_policy,
    read_policy,
    repair_policy,
    replace_policy,
)
from quiver_spark.root_kind import root_kind
from quiver_spark.subscribers import records


class HookedLocal(ObjectStore):
    """A POSIX root with the fault hooks of MemoryObjects (``faults.before/after``)."""

    def __init__(self, inner: LocalObjects) -> None:
        self.inner = inner
        self.url = inner.url
        self.faults = Faults()

    def _call(self, op: str, key: str, run: Callable[[], object]) -> object:
        if self.faults.before is not None:
            self.faults.before(op, key)
        out = run()
        if self.faults.after is not None:
            self.faults.after(op, key)
        return out

    def display(self, key: str) -> str:
        return self.inner.display(key)

    def get(self, key: str) -> Stored | None:
        return self._call("get", key, lambda: self.inner.get(key))  # type: ignore[return-value]

    def head(self, key: str) -> str | None:
        return self._call("head", key, lambda: self.inner.head(key))  # type: ignore[return-value]

    def info(self, key: str) -> ObjectInfo | None:
        return self._call("head", key, lambda: self.inner.info(key))  # type: ignore[return-value]

    def create(self, key: str, data: bytes) -> str:
        return self._call("create", key, lambda: self.inner.create(key, data))  # type: ignore[return-value]

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        return self._call(  # type: ignore[return-value]
            "replace", key, lambda: self.inner.replace(key, data, version=version)
        )

    def put(self, key: str, data: bytes) -> str:
        return self._call("put", key, lambda: self.inner.put(key, data))  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def list(self, prefix: str, *, after: str | None = None) -> list[ObjectInfo]:
        return self._call("list", prefix, lambda: self.inner.list(prefix, after=after))  # type: ignore[return-value]


@dataclass
class Root:
    """One root seen by two parties: ``mine`` (with fault hooks) and ``theirs()``."""

    mine: MemoryObjects | HookedLocal
    theirs: Callable[[], ObjectStore]

    @property
    def faults(self) -> Faults:
        return self.mine.faults

    def commit_log(self, objects: ObjectStore) -> CommitLog:
        """The root's commit records through ``objects``, as its kind builds them."""
        return root_kind(self.mine.url).commit_log(self.mine.url, objects, DEFAULT_IO)


@pytest.fixture(params=["memory", "posix"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    if request.param == "memory":
        bucket = f"control-{uuid.uuid4().hex}"
        return Root(MemoryObjects(bucket, "store"), lambda: MemoryObjects(bucket, "store"))
    path = str(tmp_path / "store")
    return Root(HookedLocal(LocalObjects(path)), lambda: LocalObjects(path))


def once(op: str, key: str, action: Callable[[], object]) -> Callable[[str, str], None]:
    """A hook running ``action`` the first time ``op`` on ``key`` (a prefix) is about
    to happen (or has happened, as an ``after`` hook)."""
    fired: list[object] = []

    def hook(o: str, k: str) -> None:
        if o == op and k.startswith(key) and not fired:
            fired.append(True)
            action()

    return hook


# -- STORE --------------------------------------------------------------------------------


def test_two_first_openers_of_one_root_share_one_store_and_its_descriptor(root: Root) -> None:
    theirs: dict[str, dict] = {}

    def other_opener() -> None:
        theirs["body"] = load_or_create_descriptor(root.theirs(), StoreConfig(), create=True)

    root.faults.before = once("create", STORE_KEY, other_opener)
    mine = load_or_create_descriptor(root.mine, StoreConfig(), create=True)
    assert "body" in theirs, "the other opener did not run first"
    assert mine["uuid"] == theirs["body"]["uuid"]
    assert read_descriptor(root.theirs()) == mine


@pytest.mark.parametrize(
    ("their_schema", "compatible"),
    [
        (pa.schema([pa.field("id", pa.int64(), nullable=False)]), True),
        (pa.schema([pa.field("id", pa.string())]), False),
    ],
    ids=["compatible", "incompatible"],
)
def test_of_two_first_writers_one_records_the_schema_and_the_other_is_judged_against_it(
    root: Root, their_schema: pa.Schema, compatible: bool
) -> None:
    load_or_create_descriptor(root.mine, StoreConfig(), create=True)
    mine = pa.schema([pa.field("id", pa.int64())])
    root.faults.before = once(
        "replace", STORE_KEY, lambda: ensure_schema(root.theirs(), their_schema)
    )
    if compatible:
        body = ensure_schema(root.mine, mine)
        recorded = recorded_schema(body)
        assert recorded is not None and recorded.equals(their_schema)  # theirs, nullability too
    else:
        with pytest.raises(SchemaMismatchError, match="column names or types differ"):
            ensure_schema(root.mine, mine)
    stored = recorded_schema(read_descriptor(root.theirs()))
    assert stored is not None and stored.equals(their_schema)


# -- commit records -----------------------------------------------------------------------


def test_two_decisions_of_one_batch_have_exactly_one_winner_and_retries_get_the_same_answers(
    root: Root,
) -> None:
    winner = root.commit_log(root.theirs())
    answers: dict[str, bool] = {}

    def other_committer() -> None:
        answers["theirs"] = winner.commit("q", 7, [("p-1", 9)], 2)

    root.faults.before = once("create", "commits/", other_committer)
    loser = root.commit_log(root.mine)
    assert loser.commit("q", 7, [("p-0", 3)], 1) is False
    assert answers == {"theirs": True}
    root.faults.before = None
    decided = root.commit_log(root.theirs()).get("q", 7)
    assert decided is not None and decided.winners == frozenset({("p-1", 9)})
    assert loser.get("q", 7) == decided
    assert winner.commit("q", 7, [("p-1", 9)], 2) is True  # its own decision, again
    assert loser.commit("q", 7, [("p-0", 3)], 1) is False
    assert root.commit_log(root.theirs()).get("q", 7) == decided


def test_a_commit_whose_response_was_lost_is_recognised_as_committed_by_its_retry(
    root: Root,
) -> None:
    def lose() -> None:
        raise OSError(errno.ETIMEDOUT, "the response to the create was lost")

    root.faults.after = once("create", "commits/q/", lose)
    log = root.commit_log(root.mine)
    with pytest.raises(OSError, match="response to the create was lost"):
        log.commit("q", 3, [("p-0", 5)], 4)
    assert log.commit("q", 3, [("p-0", 5)], 4) is True
    decided = root.commit_log(root.theirs()).get("q", 3)
    assert decided is not None and decided.winners == frozenset({("p-0", 5)})
    assert log.commit("q", 3, [("p-0", 6)], 4) is False, "another decision of a decided batch"


# -- POLICY -------------------------------------------------------------------------------


def _copy_generation(objects: ObjectStore) -> int:
    got = objects.get(POLICY_COPY_FILE)
    assert got is not None
    return int(fmt.decode_frame(POLICY_COPY_FILE, fmt.MAGIC_POLICY, got.data)["generation"])


def test_two_changes_from_one_reading_of_the_policy_cannot_both_succeed(root: Root) -> None:
    ensure_policy(root.mine, StoreConfig())
    first = lambda: replace_policy(  # noqa: E731
        root.theirs(), {"retention.max_age": 1.0}, expected_generation=1
    )
    root.faults.before = once("replace", POLICY_FILE, first)
    with pytest.raises(PolicyConflictError, match="now at generation 2"):
        replace_policy(root.mine, {"retention.max_age": 5.0}, expected_generation=1)
    policy = read_policy(root.theirs())
    assert policy is not None and (policy.generation, policy.max_age_hours) == (2, 1.0)
    assert _copy_generation(root.theirs()) == 2


def test_a_change_without_a_generation_that_loses_the_race_is_applied_on_top(
    root: Root,
) -> None:
    ensure_policy(root.mine, StoreConfig())
    first = lambda: replace_policy(root.theirs(), {"retention.max_age": 1.0})  # noqa: E731
    root.faults.before = once("replace", POLICY_FILE, first)
    new = replace_policy(root.mine, {"subscriber.expire_after": 60.0})
    assert (new.generation, new.max_age_hours, new.expire_after_s) == (3, 1.0, 60.0)
    assert read_policy(root.theirs()) == new
    assert _copy_generation(root.theirs()) == 3


def test_a_damaged_policy_applies_the_conservative_reading_refuses_changes_and_is_repaired(
    root: Root,
) -> None:
    ensure_policy(root.mine, StoreConfig())
    replace_policy(root.mine, {"retention.max_age": 2.0})
    got = root.theirs().get(POLICY_FILE)
    assert got is not None
    flipped = bytearray(got.data)
    flipped[-1] ^= 0xFF
    root.theirs().put(POLICY_FILE, bytes(flipped))

    policy = read_policy(root.mine)
    assert policy is not None and policy.damaged is not None
    assert (policy.max_age_hours, policy.size_cap_bytes, policy.expire_after_s) == (None,) * 3
    assert ensure_policy(root.mine, StoreConfig()).damaged is not None  # not recorded again
    with pytest.raises(CorruptionError, match="cannot change a damaged policy"):
        replace_policy(root.mine, {"retention.max_age": 3.0})

    repaired, where = repair_policy(root.mine, {}, from_last_good=True)
    assert where == root.mine.display(POLICY_FILE)
    assert (repaired.generation, repaired.max_age_hours) == (3, 2.0)
    assert read_policy(root.theirs()) == repaired
    assert _copy_generation(root.theirs()) == 3


def test_a_policy_missing_beside_its_copy_is_damaged_not_recorded_again(root: Root) -> None:
    ensure_policy(root.mine, StoreConfig())
    root.theirs().delete(POLICY_FILE)
    policy = ensure_policy(
        root.mine,
        StoreConfig(),
    )
    assert policy.damaged is not None and "missing, though its copy" in policy.damaged
    assert root.theirs().get(POLICY_FILE) is None
    repaired, _ = repair_policy(root.mine, {}, from_last_good=True)
    assert repaired.generation == 2 and read_policy(root.theirs()) == repaired


# -- subscription records and advisory objects -------------------------------------------


def test_an_acknowledgement_and_a_live_note_written_together_are_both_kept(root: Root) -> None:
    assert records.create_record(root.mine, "s", 100, progress=0) is True
    assert records.create_record(root.theirs(), "s", 999) is False  # left as it is
    live = lambda: records.note_live(root.theirs(), "s", 300)  # noqa: E731
    root.faults.before = once("replace", records.record_key("s"), live)
    records.touch(root.mine, "s", 200, progress=4)
    rec = records.read_record(root.theirs(), "s")
    assert rec is not None
    assert (rec.created_ns, rec.last_ack_ns, rec.last_live_ns, rec.progress) == (100, 200, 300, 4)
    assert records.list_records(root.theirs()) == {"s": rec}


def test_a_process_metrics_object_is_written_whole_and_its_counters_continue(
    root: Root,
) -> None:
    before = Metrics()
    before.inc(SOURCE_ACKED, 5, subscriber="s")
    before.write_prometheus_object(root.mine, metrics_key("consumer-s"), instance="consumer-s")
    after = Metrics()
    assert after.restore_counters_from(root.theirs(), metrics_key("consumer-s")) == 1
    assert after.get(SOURCE_ACKED, subscriber="s") == 5


# -- 409 ----------------------------------------------------------------------------------


def test_a_conditional_write_refused_with_a_409_is_written_by_its_retry(root: Root) -> None:
    refused: Counter[tuple[str, str]] = Counter()

    def conflict(op: str, key: str) -> None:
        if op in ("create", "replace", "put") and not refused[(op, key)]:
            refused[(op, key)] += 1
            raise ObjectConflict(key, f"409 ConditionalRequestConflict on {key}")

    root.faults.before = conflict
    schema = pa.schema([pa.field("id", pa.int64())])
    load_or_create_descriptor(root.mine, StoreConfig(), create=True)
    ensure_schema(root.mine, schema)
    ensure_policy(root.mine, StoreConfig())
    replace_policy(root.mine, {"retention.max_age": 2.0}, expected_generation=1)
    assert root.commit_log(root.mine).commit("q", 0, [("p-0", 1)], 1) is True
    assert records.create_record(root.mine, "s", 100) is True
    records.touch(root.mine, "s", 200)

    assert {
        ("create", STORE_KEY),
        ("replace", STORE_KEY),
        ("create", POLICY_FILE),
        ("replace", POLICY_FILE),
        ("create", "commits/q/00000000000000000000.commit"),
        ("create", records.record_key("s")),
        ("replace", records.record_key("s")),
    } <= set(refused)
    theirs = root.theirs()
    stored = recorded_schema(read_descriptor(theirs))
    assert stored is not None and stored.equals(schema)
    policy = read_policy(theirs)
    assert policy is not None and (policy.generation, policy.max_age_hours) == (2, 2.0)
    assert _copy_generation(theirs) == 2
    decided = root.commit_log(theirs).get("q", 0)
    assert decided is not None and decided.winners == frozenset({("p-0", 1)})
    rec = records.read_record(theirs, "s")
    assert rec is not None and rec.last_ack_ns == 200
