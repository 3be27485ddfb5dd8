"""The control plane over a root's objects (ARCHITECTURE.md §12): leases with epoch
fencing (:mod:`.lease`) and per-partition manifests (:mod:`.manifest`), written once
for every kind of root."""

from __future__ import annotations
