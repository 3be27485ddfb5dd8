"""A partition's GONE: the facts a listing cannot tell, kept twice on an object root
(ARCHITECTURE.md §11.3).

The seqs gone, the high and the transactions sealed and retired are kept in the
partition's MANIFEST and again in ``partitions/<pid>/GONE`` (a §6 frame, magic
``QGON``), so that a MANIFEST damaged later and rebuilt from a listing never reuses a
seq nor seals a transaction again. :class:`GoneCopy` is what an object root hands its
:class:`~.manifest_store.ManifestStore`; a POSIX root hands it
:data:`~.manifest_store.NO_FACTS`.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..errors import CorruptionError
from ..format import MAGIC_GONE
from ..layout import gone as gone_key
from ..objects import ObjectStore
from . import cas
from .manifest import Manifest

log = logging.getLogger(__name__)


class GoneCopy:
    """The GONE objects of a root's partitions, through ``objects``."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        # the GONE copy this handle last read or wrote (None: seen absent)
        self._gone: dict[str, Manifest | None] = {}

    def kept(self, partition: str) -> Manifest | None:
        """The partition's GONE (one GET): None when there is none or it fails
        verification (logged; a MANIFEST rebuilt without it relies on the ack log)."""
        key = gone_key(partition)
        got = self.objects.get(key)
        if got is None:
            self._gone[partition] = None  # none yet: a first keep creates it unread
            return None
        try:
            kept = Manifest.decode(self.objects.display(key), got.data, got.version, MAGIC_GONE)
        except CorruptionError as e:
            log.warning("quiver.manifest.gone_damaged path=%s error=%s", key, e)
            return None
        if kept.partition != partition:
            log.warning("quiver.manifest.gone_damaged path=%s names %s", key, kept.partition)
            return None
        self._gone[partition] = kept
        return kept

    def keep(self, manifest: Manifest) -> None:
        """After retention removed segments from ``manifest``'s partition: store its
        facts (:meth:`~.manifest.Manifest.facts`) joined with those already kept, in
        ``partitions/<pid>/GONE``, so that a MANIFEST damaged later is rebuilt from a
        listing without reusing a seq or sealing a transaction again. One conditional
        write while this handle wrote the last copy, a GET first otherwise; a copy that
        fails verification is replaced."""
        p, key = manifest.partition, gone_key(manifest.partition)

        def read() -> cas.Current[Manifest]:
            if p in self._gone:  # read or written by this handle (None: seen absent)
                known = self._gone[p]
                return cas.Current(known, known.version if known is not None else None)
            got = self.objects.get(key)
            if got is None:
                return cas.Current(None, None)
            try:
                display = self.objects.display(key)
                return cas.Current(
                    Manifest.decode(display, got.data, got.version, MAGIC_GONE), got.version
                )
            except CorruptionError as e:
                log.warning("quiver.manifest.gone_damaged path=%s error=%s", key, e)
                return cas.Current(None, got.version)  # a damaged copy is replaced

        def change(cur: Manifest | None) -> Manifest | None:
            if cur is None:
                return manifest.facts()
            new = cur.facts().with_facts(manifest.facts())
            return None if new == cur.facts() else new  # None: nothing new to keep

        written = cas.update(
            self.objects,
            key,
            change,
            read=read,
            encode=lambda new: new.encode(MAGIC_GONE),
            lost=lambda: self._gone.pop(p, None),
        )
        if written is not None:
            self._gone[p] = replace(written.value, version=written.version)
