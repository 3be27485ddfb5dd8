"""One store partition's writer: WAL, open segment, finalize, recovery (ARCHITECTURE.md §7).

- :mod:`.writer`: :class:`PartitionWriter`, the live writer (appends, transactions,
  finalize, maintenance, status);
- :mod:`.recovery`: rebuilding its in-memory state from disk, at open and after a
  failed I/O (§7.3, §7.4);
- :mod:`.model`: the open segment, a pending transaction, :class:`RecoveryReport`;
- :mod:`.staged_seal`: what a holder of the partition's lease does with one staged
  transaction a lost machine left (§12.6), for its next writer and for an observer.
"""

from .model import HEARTBEAT_PENDING, RecoveryReport, partition_dir
from .writer import PartitionWriter

__all__ = ["HEARTBEAT_PENDING", "PartitionWriter", "RecoveryReport", "partition_dir"]
