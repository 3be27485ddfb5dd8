"""Every ``§N`` or ``§N.M`` the code, the tests, the benchmarks and the documents cite
names a section ARCHITECTURE.md has: the normative format is read through these
references (``layout.py`` and ``format.py`` cite the sections they implement), so a
renumbered or removed section must take its references with it.

A reference in a Markdown file under ``docs/`` counts only when ``ARCHITECTURE`` is
named just before it (those guides number sections of their own); elsewhere a
reference right after the name of another document (``docs/cluster.md §4``,
``BRIEF §3``) is that document's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
SOURCES = ("quiver_spark", "tests", "bench", "integration", "examples")
DOCUMENTS = ("README.md", "ARCHITECTURE.md")

NUM = r"\d+[a-z]?(?:\.\d+)?"
REF = re.compile(rf"§\s?(?P<num>{NUM})(?![\d])(?:\s?[\u2013-]\s?(?P<num2>{NUM})(?![\d.]\d))?")
OTHER_DOCUMENT = re.compile(
    r"(cluster\.md|kubernetes\.md|BRIEF(\.md)?|STYLE(\.md)?|RELIABILITY(\.md)?"
    r"|SPARK_NOTES(\.md)?|README(\.md)?)\]?(\([^)]*\))?\)?,?\s*$"
)
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def sections(text: str) -> set[str]:
    return set(HEADING.findall(text))


def references(text: str, *, explicit: bool) -> Iterator[tuple[int, str]]:
    """``(line, number)`` of each reference to ARCHITECTURE in ``text``."""
    for m in REF.finditer(text):
        before = text[max(0, m.start() - 80) : m.start()]
        if explicit and "ARCHITECTURE" not in before:
            continue
        if not explicit and OTHER_DOCUMENT.search(before):
            continue
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group("num")
        if m.group("num2"):
            yield line, m.group("num2")


def cited(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    files = [root / d for d in DOCUMENTS]
    for d in SOURCES:
        files += sorted((root / d).rglob("*.py")) if (root / d).is_dir() else []
    docs = root / "docs"
    if docs.is_dir():
        files += [(p) for p in sorted(docs.rglob("*.md"))]
    for path in files:
        if not path.is_file() or "__pycache__" in path.parts or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8")
        explicit = path.suffix == ".md" and "docs" in path.relative_to(root).parts
        for line, num in references(text, explicit=explicit):
            yield str(path.relative_to(root)), line, num


def test_the_reference_reader_finds_what_it_should() -> None:
    text = (
        "as §12.6 says (§2\u2013§6; §8.1-8.6); docs/cluster.md §4 is the guide's;\n"
        "BRIEF §3 too; ARCHITECTURE.md §9.4\n"
    )
    assert [n for _, n in references(text, explicit=False)] == [
        "12.6",
        "2",
        "6",
        "8.1",
        "8.6",
        "9.4",
    ]
    assert [n for _, n in references(text, explicit=True)] == ["9.4"]
    assert sections("## 1. Store\n### 1.2 Keys\n#### 1.2.1 More\n## Appendix\n") == {
        "1",
        "1.2",
        "1.2.1",
    }


def test_every_reference_to_the_architecture_names_one_of_its_sections() -> None:
    known = sections(ARCHITECTURE.read_text(encoding="utf-8"))
    assert {"1", "2", "10.2", "16.2"} <= known  # the headings were read at all
    dangling = [f"{path}:{line}: §{num}" for path, line, num in cited() if num not in known]
    assert dangling == [], (
        f"{len(dangling)} references name no section of ARCHITECTURE.md:\n"
        + "\n".join(dangling[:80])
    )
