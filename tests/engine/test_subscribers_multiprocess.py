"""Several processes append to one ack log at once; a replay sees every record exactly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from quiver_spark.subscribers import Outcome, SubscriberRegistry

WORKER = textwrap.dedent(
    """
    import sys
    from quiver_spark.subscribers import Outcome, SubscriberRegistry
    root, sub, n, ckpt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    r = SubscriberRegistry.open(root, checkpoint_records=ckpt)
    for i in range(1, n + 1):
        r.record(sub, "p-%d" % (i % 2), [i], Outcome.ACK)
        if i % 10 == 0:
            r.refresh()
    r.close()
    """
)


def test_three_processes_acking_concurrently_lose_and_duplicate_nothing(tmp_path):
    root = str(tmp_path)
    setup = SubscriberRegistry.open(root)
    subs = ["w1", "w2", "w3"]
    for s in subs:
        setup.register(s)
    n = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, root, s, str(n), str(25 + 10 * k)], cwd="/work/main"
        )
        for k, s in enumerate(subs)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    setup.refresh()  # the first instance catches up through their appends and compactions
    again = SubscriberRegistry.open(root)
    for r in (setup, again):
        for s in subs:
            for p in ("p-0", "p-1"):
                expected = {i for i in range(1, n + 1) if i % 2 == int(p[-1])}
                done = {i for i in range(1, n + 2) if r.is_done(s, p, i)}
                assert done == expected, (s, p)
    assert again.state.digest() == setup.state.digest()
    stats = again.stats()["acklog"]
    assert stats["orphan_records"] == 0 and stats["salvaged_records"] == 0
    # every ack was written once: 3 x 60 outcome records + registrations since the start
    setup.record("w1", "p-0", [2, 4], Outcome.ACK)  # duplicates write nothing
    assert setup.stats()["acklog"]["records_total"] == again.stats()["acklog"]["records_total"]
    setup.close()
    again.close()
