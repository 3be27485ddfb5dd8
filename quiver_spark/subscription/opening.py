"""Opening a store to consume it, and the one-line refusal of a root that is not one."""

from __future__ import annotations

from ..config import StoreConfig
from ..errors import StoreNotFoundError
from ..root_kind import root_kind
from ..store import QuiverStore


def open_store(
    path: str, config: StoreConfig | None = None, storage_options: dict[str, str] | None = None
) -> QuiverStore:
    """A read/maintain handle on an existing store (a consumer creates nothing);
    ``storage_options``: an object root's client settings."""
    try:
        return QuiverStore.open(
            path,
            config,
            partition=None,
            create=False,
            background=False,
            storage_options=storage_options or None,
        )
    except StoreNotFoundError as e:
        raise StoreNotFoundError(
            f"{path} is not a Quiver store yet: start the writer first "
            "(df.writeStream.format('quiver').start(path)) or check the path"
        ) from e


def check_reader_root(root: str) -> None:
    """Refuse, in one line, a reader's root that is a file or a directory of other files.

    A missing or empty directory is left to :func:`open_store`, whose error says to
    start the writer first; a directory holding files but no ``STORE`` is something
    else (a directory of JSON or Parquet files), and saying "start the writer" would
    mislead.
    """
    root_kind(root).check_reader_root(root)
