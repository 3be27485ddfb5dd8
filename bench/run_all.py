"""Run every benchmark and collect their tables into bench/results/RESULTS.md.

Each ``bench/bench_*.py`` prints a markdown table on stdout and writes its JSON to
``bench/results/``. Ratios are measured side by side in one run (A B A B ...,
median of >= 3): the machines are shared and noisy, absolute times are context.

Usage: ``make bench`` or ``.venv/bin/python bench/run_all.py [name ...]``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["wal", "segment", "recovery", "acklog", "sink", "source"]


def main(argv: list[str]) -> int:
    wanted = argv or ORDER
    scripts = [HERE / f"bench_{n}.py" for n in wanted if (HERE / f"bench_{n}.py").exists()]
    out = [
        "# Benchmark results",
        "",
        f"Produced by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}.",
        "Each ratio compares Quiver with its baseline measured side by side in the same run.",
        "",
    ]
    failed = 0
    for script in scripts:
        t0 = time.monotonic()
        print(f"== {script.name}", flush=True)
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        took = time.monotonic() - t0
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            failed += 1
            sys.stderr.write(proc.stderr[-4000:])
        out += [
            f"## {script.stem.removeprefix('bench_')}",
            "",
            f"Command: `.venv/bin/python bench/{script.name}` ({took:.0f} s"
            + (", FAILED)" if proc.returncode else ")"),
            "",
            proc.stdout.strip(),
            "",
        ]
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "RESULTS.md").write_text("\n".join(out) + "\n")
    print(f"wrote {results / 'RESULTS.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
