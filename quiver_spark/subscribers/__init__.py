"""Subscribers: registration, ack/nack/dropped outcomes, marks and gap sets.

The public surface is :class:`SubscriberRegistry` with :class:`Outcome` and
:class:`StartPosition`; the on-disk format is in :mod:`.log`, the shared files' handling in :mod:`.journal`
(ARCHITECTURE.md §8).
"""

from .journal import OpenReport
from .registry import Outcome, StartPosition, SubscriberRegistry, to_runs

__all__ = ["OpenReport", "Outcome", "StartPosition", "SubscriberRegistry", "to_runs"]
