"""Moving a damaged segment aside (ARCHITECTURE.md §5.4): its files go to
``<pid>/quarantine/`` beside a ``.reason`` file, and the location's quarantine mark is
rewritten so readers that remember it know to look again.

Which segments are published is not decided here: the catalog takes the segment out of
its partition's MANIFEST before its files move.
"""

from __future__ import annotations

import logging
import os
import time

from .. import layout
from ..errors import CorruptionError
from ..format import (
    MAGIC_QUARANTINE_MARK,
    decode_frame,
    decode_reason,
    encode_frame,
    encode_reason,
)
from .backend import SegmentBackend
from .files import SegmentFiles
from .hints import note_quarantine

log = logging.getLogger(__name__)


def move_aside(files: SegmentFiles, partition: str, seq: int, reason: str) -> str:
    """Move segment ``seq``'s files to ``<pid>/quarantine/`` with a reason file, the
    ``.meta`` first, then the ``.arrow``; the mark is rewritten before the moves and
    after them. Returns where the ``.arrow`` went (or the ``.meta`` if there was no
    ``.arrow``), as messages show it."""
    b = files.backend
    arrow_path, meta_path = files.paths(partition, seq)
    qdir = b.join(layout.quarantine_dir(partition))
    b.makedirs(qdir)
    stem = f"{qdir}/{layout.quarantine_stem(seq)}"
    names = (layout.quarantined_data, layout.quarantined_meta, layout.quarantine_reason)
    if any(b.exists(name(stem)) for name in names):
        stem = f"{qdir}/{layout.quarantine_stem(seq, time.time_ns())}"  # quarantined before
    note = encode_reason(partition, seq, time.time_ns(), reason)
    b.put(layout.quarantine_reason(stem), lambda consume: consume(memoryview(note)))
    moved = layout.quarantined_meta(stem)
    _replace_mark(b, partition, seq)  # before the moves: a failed one is noticed too
    for src, dst in (
        (meta_path, layout.quarantined_meta(stem)),
        (arrow_path, layout.quarantined_data(stem)),
    ):
        if b.exists(src):
            b.move(src, dst)
            moved = dst
    _replace_mark(b, partition, seq)  # again: readers that listed meanwhile look again
    shown = b.display(moved)
    log.warning(
        "quiver.segment.quarantine partition=%s seq=%d to=%s reason=%s",
        partition,
        seq,
        shown,
        reason,
    )
    return shown


def quarantine_mark(backend: SegmentBackend) -> bytes | None:
    """The bytes of the location's quarantine mark, None if nothing was ever
    quarantined there: one small read."""
    path = backend.join(layout.quarantine_mark())
    raw = backend.read_many([path])[path]
    if raw is not None:
        try:
            decode_frame(backend.display(path), MAGIC_QUARANTINE_MARK, raw)
        except CorruptionError as e:  # still a change signal: its bytes are compared
            log.warning("quiver.segment.quarantine_mark_damaged error=%s", e)
    return raw


def _replace_mark(backend: SegmentBackend, partition: str, seq: int) -> None:
    token = os.urandom(8)
    body = {"changed_ns": time.time_ns(), "partition": partition, "seq": seq, "token": token}
    mark = encode_frame(MAGIC_QUARANTINE_MARK, body)
    path = backend.join(layout.quarantine_mark())
    backend.put(  # a temporary name of its own: quarantines may run concurrently
        path,
        lambda consume: consume(memoryview(mark)),
        tmp=backend.join(layout.quarantine_mark_tmp(token.hex())),
        replace=True,  # rewritten whole by every quarantine, on an object root too
    )
    note_quarantine(backend)


def quarantine_note(files: SegmentFiles, partition: str, seq: int) -> str:
    """The reason text recorded when ``seq`` was quarantined ("" if none is readable)."""
    raw = files.quarantined(partition).get(seq)
    if raw is None or not layout.is_quarantine_reason(raw):
        return ""
    try:
        return decode_reason(files.backend.read(raw))
    except OSError:
        return ""
