"""A consumer's record of a segment it lost (``readers/<name>.lost.jsonl``) on an object
root is written again when the storage answers 409 (another conditional write on the
key was in progress, nothing written), as every conditional write is: a 409 is not a
reason to drop the record."""

from __future__ import annotations

import json
import uuid

from quiver_spark.dataloss import ObjectLostLog
from quiver_spark.errors import ObjectConflict
from quiver_spark.objects.memory import MemoryObjects


class ConflictingOnce(MemoryObjects):
    """Answers the first conditional write with a 409, as S3 does under contention."""

    def __init__(self) -> None:
        super().__init__("qbucket", f"lost-{uuid.uuid4().hex[:12]}")  # a store of its own
        self.conflicts = 0

    def _conflict_once(self, key: str) -> None:
        if self.conflicts == 0:
            self.conflicts += 1
            raise ObjectConflict(key, "409 ConditionalRequestConflict")

    def create(self, key: str, data: bytes) -> str:
        self._conflict_once(key)
        return super().create(key, data)

    def replace(self, key: str, data: bytes, *, version: str) -> str:
        self._conflict_once(key)
        return super().replace(key, data, version=version)


def test_a_409_on_the_first_record_is_written_again() -> None:
    objects = ConflictingOnce()
    log = ObjectLostLog("memory://store", "exporter", objects)
    log.record("p-0", 7, "missing", skipped=True, evidence=None)
    got = objects.get(log.key)
    assert objects.conflicts == 1
    assert got is not None, "the record was dropped after one 409"
    lines = [json.loads(line) for line in got.data.decode().splitlines()]
    assert [(r["partition"], r["seq"]) for r in lines] == [("p-0", 7)]


def test_a_409_on_a_later_record_is_written_again() -> None:
    objects = ConflictingOnce()
    objects.conflicts = 1  # the first record lands
    log = ObjectLostLog("memory://store", "exporter", objects)
    log.record("p-0", 7, "missing", skipped=True, evidence=None)
    objects.conflicts = 0  # the next conditional write meets a 409
    log.record("p-1", 9, "corrupt", skipped=True, evidence=None)
    got = objects.get(log.key)
    assert got is not None
    seqs = [(r["partition"], r["seq"]) for r in map(json.loads, got.data.decode().splitlines())]
    assert seqs == [("p-0", 7), ("p-1", 9)]
