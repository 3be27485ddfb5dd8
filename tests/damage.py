"""Damaging store files on purpose: the one set of helpers every test uses.

Each helper makes the file writable first (segments and ``.meta`` files are 0444).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PathLike = str | Path | os.PathLike[str]


def make_writable(path: PathLike) -> None:
    """Add the owner's write bit (finalized files are created read-only)."""
    mode = os.stat(path).st_mode
    if not mode & stat.S_IWUSR:
        os.chmod(path, stat.S_IMODE(mode) | stat.S_IWUSR)


def flip_bit(path: PathLike, offset: int, bit: int = 0) -> None:
    """Invert bit ``bit`` (0..7) of the byte at ``offset``; a second call restores it."""
    _xor(path, offset, 1 << bit)


def flip_byte(path: PathLike, offset: int) -> None:
    """Invert every bit of the byte at ``offset``."""
    _xor(path, offset, 0xFF)


def _xor(path: PathLike, offset: int, mask: int) -> None:
    make_writable(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        if not b:
            raise ValueError(f"offset {offset} is past the end of {path}")
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def cut_at(path: PathLike, size: int) -> None:
    """Truncate the file to ``size`` bytes."""
    make_writable(path)
    os.truncate(path, size)


def truncate_by(path: PathLike, n: int) -> None:
    """Remove the last ``n`` bytes of the file."""
    cut_at(path, max(0, os.path.getsize(path) - n))


def append_garbage(path: PathLike, data: bytes) -> None:
    """Append ``data`` to the file."""
    make_writable(path)
    with open(path, "ab") as f:
        f.write(data)
