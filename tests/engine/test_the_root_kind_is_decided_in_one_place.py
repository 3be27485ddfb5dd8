"""What differs between a POSIX root and an object root is decided once, when the root's
kind is chosen from its URL (``root_kind.py``: ``FileRoot``, ``ObjectRoot``), and the
kind builds the parts that differ: the commit log's durability, the ack log's journal,
the live-consumer locks, the segment location, the lost-segment log. Nothing else in
the package works the kind out again: not from the objects' type
(``isinstance(..., LocalObjects)`` behind a wrapper), not from an ``objects`` left None
for POSIX, not from the URL (``urls.py`` parses URLs; only ``root_kind()`` asks it which
kind a root is).

A new such branch fails this test, naming its file and line: build the part in the two
kinds instead, and hand it over.
"""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "quiver_spark"

BRANCH = re.compile(
    r"on_objects|is_object_root|manifest_publishes|non_posix|local_of"
    r"|isinstance\([^)]*LocalObjects|is_local_url|\.posix|objects is None|objects is not None"
    r"|\blease is None|\blease is not None|manifests is None|manifests is not None"
    r"|\.stages\b|\.leases\b|keeps_facts|is_object_url"
    r"|(?:\bis (?:not )?|[!=]=\s*)(?:FileJournal|ObjectJournal|FlockLive|LeaseLive)\b"
    r"|isinstance\([^)]*(?:FileJournal|ObjectJournal|FlockLive|LeaseLive|ManifestStore)"
)
"""What asks, outside the seam, which kind of root it is on: besides the forms above,
a writer's lease left None for POSIX (the POSIX kind hands over a lease that checks
nothing), segments without a MANIFEST taken for POSIX (a location without MANIFESTs
holds ``NO_MANIFESTS``, which reads none and writes none), the journal or the live locks
a kind handed over asked for their class, and a kind's flags (whether it stages, whether
its live locks are leases, whether it keeps GONE facts)."""

SEAM = {"root_kind.py", "urls.py"}
"""The kinds themselves, and the module that parses URLs."""

KNOWN = {
    ("subscribers/objects_journal.py", "if objects is None:"): (
        "ObjectJournal.open refuses to open without the root's objects (a caller's "
        "mistake, a TypeError): no decision between the kinds"
    ),
    (
        "partition/staged.py",
        "assert isinstance(segments.manifests, ManifestStore)  # an object root's segments",
    ): (
        "staged_objects: the bucket of a partition's staged transactions, asked only by "
        "a writer that found staged transactions, which only an object root's writer "
        "stages; the assertion states that, it decides nothing"
    ),
}
"""Matches that are no root-kind decision, with why: ``(file, stripped line)``."""


def branches(sources: dict[str, str]) -> list[str]:
    """``file:line: text`` of each match in ``sources`` (path relative to the package:
    its text) that is neither in the seam nor known."""
    found = []
    for name, text in sorted(sources.items()):
        if name in SEAM:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if BRANCH.search(line) and (name, line.strip()) not in KNOWN:
                found.append(f"quiver_spark/{name}:{n}: {line.strip()}")
    return found


def _package() -> dict[str, str]:
    return {p.relative_to(PKG).as_posix(): p.read_text() for p in sorted(PKG.rglob("*.py"))}


def test_no_module_outside_the_root_kind_works_out_the_kind_of_its_root() -> None:
    found = branches(_package())
    assert not found, (
        "the root's kind is worked out outside root_kind.py (have the kind build the "
        "part and hand it over):\n" + "\n".join(found)
    )


def test_the_known_matches_are_still_there_and_few() -> None:
    sources = _package()
    stale = [
        k
        for k in KNOWN
        if not any(line.strip() == k[1] for line in sources.get(k[0], "").splitlines())
    ]
    assert not stale, f"known matches that are gone (drop them from KNOWN): {stale}"
    assert len(KNOWN) <= 3


def test_a_planted_branch_is_found_and_named_by_its_file_and_line() -> None:
    planted = {
        "store.py": "x = 1\n",
        "planted.py": (
            "def f(objects):\n"
            "    if objects is None:  # POSIX\n"
            "        return 1\n"
            "    return isinstance(objects.inner, LocalObjects)\n"
            "staged_due = kind.stages and writer.lease is not None\n"
            "    if manifests is None:\n"
            "    if self._manifests is not None:\n"
            "tasks = a(run) if journal is FileJournal else b(run)\n"
            "tasks = b(run) if journal is not ObjectJournal else a(run)\n"
            "tasks = a(run) if journal == FileJournal else b(run)\n"
            "if isinstance(journal, (FileJournal, ObjectJournal)):\n"
            "if isinstance(locks, FlockLive | LeaseLive):\n"
            "if isinstance(locks, LeaseLive):\n"
            "if isinstance(location.manifests, ManifestStore):\n"
            "journal: JournalKind = FileJournal\n"
        ),
        "root_kind.py": "if objects is None:\n",
        "subscribers/objects_journal.py": "        if objects is None:\n",
    }
    assert branches(planted) == [
        "quiver_spark/planted.py:2: if objects is None:  # POSIX",
        "quiver_spark/planted.py:4: return isinstance(objects.inner, LocalObjects)",
        "quiver_spark/planted.py:5: staged_due = kind.stages and writer.lease is not None",
        "quiver_spark/planted.py:6: if manifests is None:",
        "quiver_spark/planted.py:7: if self._manifests is not None:",
        "quiver_spark/planted.py:8: tasks = a(run) if journal is FileJournal else b(run)",
        "quiver_spark/planted.py:9: tasks = b(run) if journal is not ObjectJournal else a(run)",
        "quiver_spark/planted.py:10: tasks = a(run) if journal == FileJournal else b(run)",
        "quiver_spark/planted.py:11: if isinstance(journal, (FileJournal, ObjectJournal)):",
        "quiver_spark/planted.py:12: if isinstance(locks, FlockLive | LeaseLive):",
        "quiver_spark/planted.py:13: if isinstance(locks, LeaseLive):",
        "quiver_spark/planted.py:14: if isinstance(location.manifests, ManifestStore):",
    ]
