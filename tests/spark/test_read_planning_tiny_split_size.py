"""A `splitSize` far below the open cost plans a few small segments in bounded memory.

Planning runs in a child process under an address-space limit, so a plan whose memory
grew with `1/splitSize` shows as a MemoryError there instead of exhausting the machine.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import resource, sys
    from dataclasses import replace
    sys.path.insert(0, sys.argv[1])
    from tests.spark.source_helpers import write_segments
    from quiver_spark.subscription.read_tasks import pack_read_tasks

    meta = write_segments(sys.argv[2], 1)[0]
    metas = [replace(meta, seq=s) for s in range(1, 9)]  # 8 small segments, ~1-2 KB each
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + 768 * 1024 * 1024, resource.RLIM_INFINITY))
    tasks = pack_read_tasks(metas, 1, min_tasks=2)  # option("splitSize", "1")
    assert sorted(m.seq for t in tasks for m, _, _ in t) == list(range(1, 9)), tasks
    print("OK", len(tasks))
    """
)


def test_split_size_of_one_byte_plans_a_few_small_segments_in_bounded_memory(tmp_path):
    root = str(__import__("pathlib").Path(__file__).parents[2])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, root, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-2000:]
