"""Finalized segments: immutable Arrow IPC files plus checksummed metadata (ARCHITECTURE.md §5).

The store talks to :class:`SegmentLocation`; everything else here is its parts:

====================  ===========================================================
``catalog``           :class:`SegmentLocation`: which segments exist, write,
                      publish, delete, cleanup, quarantine
``publication``       :class:`~.publication.Publication`: what makes a segment
                      published (the interface, what both protocols share)
``publish_files``     :class:`~.publish_files.FilePublication`: the ``.meta``
                      publishes (a POSIX or fsspec root)
``publish_manifest``  :class:`~.publish_manifest.ManifestPublication`: the
                      MANIFEST publishes (an object root): fencing, void seqs,
                      orphans, the listing's answer without a MANIFEST
``files``             :class:`~.files.SegmentFiles`: segment files named, listed
                      and read, the verified-metadata cache
``quarantine``        moving a damaged segment aside, the quarantine mark
``removal``           :class:`~.removal.CleanupReport`: a partition's leftovers
                      cleared before its writer writes; segments found gone
                      before a delete, logged
``backend``           :class:`SegmentBackend`: the file operations a location needs
``backends``          :func:`~.backends.open_backend`: which backend a location opens
``local``             :class:`LocalBackend`: a POSIX directory, fsync and rename
``remote``            :class:`RemoteBackend`: an fsspec URL, single-request uploads
``objects``           :class:`ObjectBackend`: keys in an object root's store;
                      :class:`BucketBackend`: a ``segment.path`` on an object store
``writer``            serializing batches into one Arrow IPC file, CRC while writing
``reader``            :class:`SegmentReader`: verified reads of one ``.arrow``
``meta``              :class:`SegmentMeta`: the ``.meta`` body, schema fingerprints
====================  ===========================================================
"""

from .backend import SegmentBackend
from .catalog import SegmentLocation
from .files import DamagedSegment, SegmentListing, SegmentSurvey
from .hints import Look
from .meta import SegmentMeta, schema_fingerprint
from .reader import SegmentReader
from .removal import CleanupReport

__all__ = [
    "CleanupReport",
    "DamagedSegment",
    "Look",
    "SegmentBackend",
    "SegmentListing",
    "SegmentLocation",
    "SegmentMeta",
    "SegmentReader",
    "SegmentSurvey",
    "schema_fingerprint",
]
