"""README's benchmark figures are the tables ``bench/tables.py`` renders from the result
files in ``bench/results``: none is copied by hand, so none drifts from its benchmark."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RESULTS = REPO / "bench" / "results"


def _tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_tables", REPO / "bench" / "tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLES = _tables()
RESULT_NAMES = sorted(p.stem for p in RESULTS.glob("*.json"))


@pytest.mark.parametrize("name", RESULT_NAMES)
def test_the_readme_table_of_each_benchmark_is_rendered_from_its_result_file(name: str) -> None:
    rendered = TABLES.blocks()
    shown = TABLES.block(README.read_text(encoding="utf-8"), name)
    assert shown is not None, (
        f"README.md lacks the table of bench/results/{name}.json: add `<!-- bench:{name} -->` "
        f"and `<!-- /bench:{name} -->` lines to its Benchmarks section and run `{TABLES.COMMAND}`"
    )
    assert shown == rendered[name], (
        f"README.md's bench:{name} table differs from bench/results/{name}.json; "
        f"regenerate it with `{TABLES.COMMAND}`"
    )


def test_every_result_file_has_a_table() -> None:
    assert RESULT_NAMES, "bench/results holds no result file"
    assert set(RESULT_NAMES) <= set(TABLES.RENDER), "bench/tables.py renders no table for " + str(
        sorted(set(RESULT_NAMES) - set(TABLES.RENDER))
    )


def test_the_benchmarks_section_has_no_table_outside_the_generated_blocks() -> None:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^## Benchmarks\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md lacks its Benchmarks section"
    outside = re.sub(r"<!-- bench:(\w+) -->\n.*?\n<!-- /bench:\1 -->", "", m.group(1), flags=re.S)
    by_hand = [line for line in outside.splitlines() if line.startswith("|")]
    assert not by_hand, (
        "README.md's Benchmarks section has table rows written by hand; render them from "
        f"bench/results with bench/tables.py instead: {by_hand[:3]}"
    )


def test_a_figure_changed_in_a_result_file_changes_its_table() -> None:
    data = json.loads((RESULTS / "wal.json").read_text())
    before = TABLES.wal(data)
    changed = copy.deepcopy(data)
    changed["gb_per_s"]["wal_group_fsync"] += 1.0
    after = TABLES.wal(changed)
    assert before != after
    text = f"x\n<!-- bench:wal -->\n{before}\n<!-- /bench:wal -->\ny\n"
    new, missing = TABLES.replace_blocks(text, {"wal": after})
    assert missing == [] and new == f"x\n<!-- bench:wal -->\n{after}\n<!-- /bench:wal -->\ny\n"
