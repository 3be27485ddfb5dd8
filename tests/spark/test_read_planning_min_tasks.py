"""Read planning never makes fewer tasks than `min_tasks` when there are enough segments.

Packing small segments by size never leaves a core idle: 4 small segments on a
4-CPU driver make 4 tasks, however unequal their sizes.
"""

from __future__ import annotations

from dataclasses import replace

from quiver_spark.subscription.read_tasks import pack_read_tasks

from .source_helpers import write_segments

MB = 1024 * 1024


def test_four_small_segments_on_four_cpus_make_four_tasks(tmp_path):
    meta = write_segments(str(tmp_path / "s"), 1)[0]
    metas = [replace(meta, seq=s, size_bytes=size) for s, size in enumerate([MB, MB, MB, 16 * MB], 1)]
    tasks = pack_read_tasks(metas, 64 * MB, min_tasks=4)  # default splitSize, os.cpu_count() == 4
    assert [[m.seq for m, _, _ in t] for t in tasks] == [[1], [2], [3], [4]]
