"""Opening the subscriber registry of a store for the CLI."""

from __future__ import annotations

import os

from .. import format as fmt
from ..store import QuiverStore
from ..subscribers import SubscriberRegistry


def open_registry(store: QuiverStore, *, create: bool = False) -> SubscriberRegistry | None:
    """The store's subscriber registry, or None.

    None when the store has no ``subscribers/`` directory yet and ``create`` is
    false, so read-only commands never create one.
    """
    if not create and not os.path.isdir(os.path.join(store.root, fmt.SUBSCRIBERS_DIR)):
        return None
    return SubscriberRegistry.open(store.root)
