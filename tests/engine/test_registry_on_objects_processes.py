"""Processes sharing nothing but an object root's ack log (§13.7) register and
acknowledge at once: every acknowledgement is kept, each contested name is won by
exactly one process, and a new process replays the same state. The root here is a
directory through the object interface (create-if-absent is an atomic link), with
the object journal chosen explicitly, so real processes race on real preconditions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from quiver_spark.objects.local import LocalObjects
from quiver_spark.subscribers import Outcome, SubscriberRegistry
from quiver_spark.subscribers.objects_journal import ObjectJournal

WORKER = textwrap.dedent(
    """
    import json, sys
    from quiver_spark.errors import SubscriberError
    from quiver_spark.objects.local import LocalObjects
    from quiver_spark.subscribers import Outcome, SubscriberRegistry
    from quiver_spark.subscribers.objects_journal import ObjectJournal
    root, sub, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    objects = LocalObjects(root)
    journal = ObjectJournal.open(objects.url, objects=objects)
    journal.checkpoint_deltas = 8
    r = SubscriberRegistry(journal)
    won = []
    for i in range(1, n + 1):
        r.record(sub, "p-%d" % (i % 2), [i], Outcome.ACK)
        try:
            r.register("contested-%d" % (i % 5))
            won.append("contested-%d" % (i % 5))
        except SubscriberError:
            pass
    print(json.dumps(won))
    """
)


def _open(root: str) -> SubscriberRegistry:
    objects = LocalObjects(root)
    return SubscriberRegistry(ObjectJournal.open(objects.url, objects=objects))


def test_three_processes_keep_every_ack_and_win_each_name_once(tmp_path):
    root = str(tmp_path)
    setup = _open(root)
    subs = ["w1", "w2", "w3"]
    for s in subs:
        setup.register(s)
    n = 30
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, root, s, str(n)], stdout=subprocess.PIPE, text=True
        )
        for s in subs
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    wins = sorted(w for out in outs for w in json.loads(out))
    assert wins == [f"contested-{i}" for i in range(5)]  # each won by exactly one process
    setup.refresh()
    again = _open(root)
    for r in (setup, again):
        for s in subs:
            for p in ("p-0", "p-1"):
                expected = {i for i in range(1, n + 1) if i % 2 == int(p[-1])}
                assert {i for i in range(1, n + 2) if r.is_done(s, p, i)} == expected
    assert again.state.digest() == setup.state.digest()
    assert again.stats()["acklog"]["checkpoint_gen"] > 0  # their checkpoints were read
    before = again.stats()["acklog"]["records_total"]
    again.record("w1", "p-0", [2, 4], Outcome.ACK)  # duplicates write nothing
    assert again.stats()["acklog"]["records_total"] == before
