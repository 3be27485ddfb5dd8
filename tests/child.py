"""Python code run in a fresh interpreter: a writer, committer or consumer process of its
own, which a test lets finish, dies with ``os._exit`` or races against."""

from __future__ import annotations

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
