"""Damaging store files on purpose, shared by the CLI and Spark tests."""

from __future__ import annotations

import os
from pathlib import Path


def flip_byte(path: str | Path, offset: int) -> None:
    """Invert the byte at ``offset`` of ``path`` (made writable first: segments are 0444)."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
