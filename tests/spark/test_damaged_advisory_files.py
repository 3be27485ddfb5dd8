"""A damaged advisory file never fails a Spark query that does not need it.

A restarted streaming query whose consumer metrics file (``metrics/consumer-<name>.prom``)
was damaged, or whose store's POLICY was, reads and acknowledges every new row; its
counters restart from zero and the file is rewritten whole.
"""

from __future__ import annotations

import os

from quiver_spark.metrics import read_exposition
from quiver_spark.policy import POLICY_FILE

from ..damage import flip_bit, flip_byte
from .source_helpers import Collector, registry_hwm, run_available_now, stream, write_segments


def test_a_restarted_query_goes_on_over_a_damaged_metrics_file(spark, tmp_path) -> None:
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 2)
    run_available_now(stream(spark, root, "m"), ckpt, Collector())
    prom = os.path.join(root, "metrics", "consumer-m.prom")
    flip_bit(prom, os.path.getsize(prom) // 2, 7)  # no longer UTF-8
    write_segments(root, 2, first_key=20)
    got = Collector()
    run_available_now(stream(spark, root, "m"), ckpt, got)  # the restart
    assert got.keys() == list(range(20, 40))
    assert registry_hwm(root, "m") == 4
    read_exposition(prom)  # rewritten whole


def test_a_restarted_query_goes_on_over_a_damaged_policy(spark, tmp_path) -> None:
    root, ckpt = str(tmp_path / "store"), str(tmp_path / "ckpt")
    write_segments(root, 2)
    run_available_now(stream(spark, root, "p"), ckpt, Collector())
    flip_byte(os.path.join(root, POLICY_FILE), 20)
    write_segments(root, 2, first_key=20)
    got = Collector()
    run_available_now(stream(spark, root, "p"), ckpt, got)
    assert got.keys() == list(range(20, 40))
    assert registry_hwm(root, "p") == 4
