"""Opening the subscriber registry of a store for the CLI."""

from __future__ import annotations

from ..store import QuiverStore
from ..subscribers import SubscriberRegistry
from ..subscribers import open_registry as open_store_registry


def open_registry(store: QuiverStore, *, create: bool = False) -> SubscriberRegistry | None:
    """``store``'s subscriber registry, or None when it has none and ``create`` is
    false (see :func:`quiver_spark.subscribers.open_registry`)."""
    return open_store_registry(
        store.root,
        journal=store.kind.journal,
        create=create,
        objects=store.objects,
        io=store.io,
        salvage=store.config.salvage,
    )
