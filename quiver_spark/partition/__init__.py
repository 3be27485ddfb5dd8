"""One store partition's writer: WAL, open segment, finalize, recovery (ARCHITECTURE.md §9).

================  ===================================================================
``writer``        :class:`PartitionWriter`, the live writer (appends, transactions,
                  finalize, maintenance, status, close): owns the state below and its
                  lock, and hands the sealing and the rebuild the groups each uses
``state``         its mutable state, in groups by concern, each the one writer of its
                  fields: handles (pid, config, paths...), the WAL ledger (WAL writer,
                  covered seqs, next segment seq; STATE's body, §6.2), the unsealed
                  rows (open segment, pending transactions), the segment past the
                  commit point, the lifecycle (the failure, closed)
``sealing``       on that state: the admission of rows into the open segment and the
                  finalize: ``.arrow``, STATE's commit point, publication, WAL
                  truncation (§9.2)
``rebuild``       on that state: the plans of ``recovery`` applied, at open and in
                  place after a failed I/O (§9.3, §9.4), sealing through the sealing
``recovery``      planning a recovery at open and after a failed I/O (§9.3, §9.4):
                  reads STATE, the ack log, the MANIFEST and ``txns/``, returns frozen
                  plans; writes nothing
``failure``       what a failed I/O left the writer with, and the cut of a failed WAL
                  (§9.4)
``publication``   the writer's publication: lease check, a seq taken by another
                  holder where the MANIFEST publishes (§11.3)
``staged``        the writer's bookkeeping of its partition's staged transactions on an
                  object root: failed deletes, another incarnation's, the txn floor
                  (§10.2)
``staged_seal``   what a holder of the partition's lease does with one staged
                  transaction a lost machine left (§10.2), for its next writer and for
                  an observer
``model``         the open segment, a pending transaction, :class:`RecoveryReport`
``wal_dirs``      the partition directories of this machine's WAL root: WAL bytes,
                  heartbeats, sealing those whose writer is gone (§9.3)
================  ===================================================================
"""

from .model import HEARTBEAT_PENDING, RecoveryReport, partition_dir
from .writer import PartitionWriter

__all__ = ["HEARTBEAT_PENDING", "PartitionWriter", "RecoveryReport", "partition_dir"]
