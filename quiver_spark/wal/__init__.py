"""The write-ahead log: :class:`WalWriter` appends, :func:`recover_wal` verifies and repairs.

Byte layouts and the torn-tail rule are specified in ARCHITECTURE.md §4.1-§4.2.
"""

from .reader import (
    WalDecoder,
    WalRecord,
    WalRecovery,
    WalScan,
    decode_txn,
    recover_wal,
    scan_wal_file,
    wal_limits,
)
from .writer import WalCarry, WalFileInfo, WalWriter, encode_txn, list_wal_files

__all__ = [
    "WalCarry",
    "WalDecoder",
    "WalFileInfo",
    "WalRecord",
    "WalRecovery",
    "WalScan",
    "WalWriter",
    "decode_txn",
    "encode_txn",
    "list_wal_files",
    "recover_wal",
    "scan_wal_file",
    "wal_limits",
]
