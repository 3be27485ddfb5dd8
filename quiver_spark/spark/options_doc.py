"""The README's option tables, generated from the one option table of each side.

``python -m quiver_spark.spark.options_doc`` prints them; a test checks that README.md
holds exactly this text between its ``<!-- options:... -->`` markers.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..options import STORAGE_OPTION_TABLE, STORE_OPTION_TABLE, Option
from .source_options import SOURCE_OPTION_TABLE


def _cell(default: str) -> str:
    plain = ("none", "required", "required for streams")
    return default if default in plain or " " in default else f"`{default}`"


def table(options: Iterable[Option]) -> str:
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for o in options:
        rows.append(f"| `{o.name}` | {_cell(o.default)} | {o.help} |")
    return "\n".join(rows)


def sink_table() -> str:
    return table(STORE_OPTION_TABLE)


def source_table() -> str:
    return table(SOURCE_OPTION_TABLE)


def storage_table() -> str:
    return table(STORAGE_OPTION_TABLE)


BLOCKS = {"sink": sink_table, "source": source_table, "storage": storage_table}


def main() -> None:
    for name, make in BLOCKS.items():
        print(f"<!-- options:{name} -->\n{make()}\n<!-- /options:{name} -->\n")


if __name__ == "__main__":
    main()
