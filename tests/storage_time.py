"""Time passing at the storage, as subscriber expiry measures it (ARCHITECTURE.md §13.8).

Expiry counts idleness on the storage's clock: from when the storage says a
subscription record was last written (or the storage time a record carries over,
``activity_carried_ns``, ``expired_stored_ns``) to when it says the pass's probe was.
A test that wants a subscriber idle for hours makes every such storage time of the
root's records that much older: on a POSIX root the record files' mtimes move back,
on a ``memory://`` root its objects age; the storage times inside the records move back
alike. (An S3 root's times cannot be moved: a test there waits.)
"""

from __future__ import annotations

import os
from pathlib import Path

from quiver_spark import format as fmt
from quiver_spark import layout
from quiver_spark.errors import CorruptionError
from quiver_spark.objects import memory
from quiver_spark.subscribers import records
from quiver_spark.urls import is_object_url

HOUR_S = 3600.0
STORAGE_TIMES = ("activity_carried_ns", "expired_stored_ns")
"""The keys of a record that hold a time of the storage's clock."""


def _shifted(raw: bytes, by_ns: int) -> bytes:
    """A record's bytes with its storage times ``by_ns`` earlier (a damaged one as is)."""
    try:
        body = fmt.decode_frame("record", fmt.MAGIC_SUBSCRIPTION, raw)
    except CorruptionError:
        return raw
    for key in STORAGE_TIMES:
        if body.get(key) is not None:
            body[key] -= by_ns
    return fmt.encode_frame(fmt.MAGIC_SUBSCRIPTION, body)


def time_passes(root: str | Path, seconds: float) -> None:
    """Every subscription record of ``root`` as if written ``seconds`` earlier by the
    storage's clock, as if that long had passed since with no write."""
    root, by_ns = str(root), int(seconds * 10**9)
    if root.startswith("memory://"):
        with memory._LOCK:
            for objects in memory._BUCKETS.values():
                for key, (data, version) in list(objects.items()):
                    if layout.is_subscriber_record(key):
                        objects[key] = (_shifted(data, by_ns), version)
        memory.age_objects(seconds)
        return
    assert not is_object_url(root), f"{root}: only a POSIX or memory:// root can be aged"
    d = records.records_dir(root)
    for name in os.listdir(d) if os.path.isdir(d) else []:
        if layout.is_subscriber_record(name):
            path = os.path.join(d, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                raw = f.read()
            with open(path, "wb") as f:
                f.write(_shifted(raw, by_ns))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - by_ns))
