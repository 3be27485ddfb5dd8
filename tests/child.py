"""Python code run in a fresh interpreter: a writer, committer, consumer or reader process of its
own, which a test lets finish, dies with ``os._exit`` or races against."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run_python(
    code: str, *, check: bool = True, capture: bool = False, timeout: float = 120.0, **names: object
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a new interpreter of this virtualenv.

    Each keyword in ``names`` is assigned first, by its ``repr``. ``check`` raises on a
    non-zero exit; ``capture`` keeps stdout and stderr (text) in the result.
    """
    assigns = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    return subprocess.run(
        [sys.executable, "-c", assigns + textwrap.dedent(code)],
        check=check,
        capture_output=capture,
        text=True,
        timeout=timeout,
    )


_READ_IDS = """
import json
from quiver_spark import QuiverStore
with QuiverStore.open(root, background=False) as store:
    store.finalize()
    ids = sorted(i for b in store.scan() for i in b.column("id").to_pylist())
print(json.dumps(ids))
"""


def ids_read_by_a_new_process(root: str) -> list[int]:
    """Every ``id`` the store at ``root`` holds, sorted, as a new interpreter reads it:
    it opens the store (its writer recovers), seals what is open and scans."""
    out = run_python(_READ_IDS, capture=True, root=root)
    return json.loads(out.stdout.strip().splitlines()[-1])
