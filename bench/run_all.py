"""Run every benchmark and collect their tables into bench/results/RESULTS.md.

Each ``bench/bench_*.py`` prints a markdown table on stdout and writes its JSON to
``bench/results/``. Ratios are measured side by side in one run (A B A B ...,
median of >= 3): the machines are shared and noisy, absolute times are context.

Usage: ``make bench`` or ``.venv/bin/python bench/run_all.py [name ...]``. A name may
carry the script's arguments (``"sink --only p9"``). Running some names replaces
only their sections of RESULTS.md and keeps the others. ``soak`` (P11, 20+ minutes)
is not in ``make bench``: ``make bench-soak`` runs it. README.md's tables are
rendered from the JSON files by ``bench/tables.py --write`` (``make bench`` runs it
after this).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["wal", "segment", "recovery", "acklog", "sink", "source", "trigger", "object_requests",
         "startup", "idle_partition", "catch_up", "one_protocol"]  # fmt: skip
NOT_IN_BENCH = ["soak"]  # long: make bench-soak


def _sections(text: str) -> dict[str, str]:
    """The ``## name`` sections of an existing RESULTS.md."""
    parts = re.split(r"^## (\w+)\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def main(argv: list[str]) -> int:
    wanted = [shlex.split(a) for a in (argv or ORDER)]
    runs = [(HERE / f"bench_{w[0]}.py", w[1:]) for w in wanted]
    missing = [str(s) for s, _ in runs if not s.exists()]
    if missing:
        print(f"no such benchmark: {missing}", file=sys.stderr)
        return 2
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    old = _sections((results / "RESULTS.md").read_text()) if argv and (results / "RESULTS.md").exists() else {}  # fmt: skip
    sections: dict[str, str] = {}
    sections_run = [" ".join(w) for w in wanted]
    out = [
        "# Benchmark results",
        "",
        f"Produced by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}"
        + (f" (this update: {', '.join(sections_run)}; the other sections are from earlier runs)."
           if argv else "."),
        "Each ratio compares Quiver with its baseline measured side by side in the same run.",
        "",
    ]
    failed = 0
    for script, extra in runs:
        t0 = time.monotonic()
        print(f"== {script.name} {' '.join(extra)}", flush=True)
        proc = subprocess.run([sys.executable, str(script), *extra], capture_output=True, text=True)
        took = time.monotonic() - t0
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            failed += 1
            sys.stderr.write(proc.stderr[-4000:])
        command = " ".join([f"bench/{script.name}", *map(shlex.quote, extra)])
        sections[script.stem.removeprefix("bench_")] = "\n".join([
            f"Command: `.venv/bin/python {command}` ({took:.0f} s"
            + (", FAILED)" if proc.returncode else ")")
            + f"; load average {os.getloadavg()[0]:.1f} at its end",
            "",
            proc.stdout.strip(),
        ])  # fmt: skip
    names = [n for n in ORDER + NOT_IN_BENCH if n in old or n in sections]
    names += [n for n in [*old, *sections] if n not in names]
    for name in names:
        out += [f"## {name}", "", sections.get(name) or old[name], ""]
    (results / "RESULTS.md").write_text("\n".join(out) + "\n")
    print(f"wrote {results / 'RESULTS.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
