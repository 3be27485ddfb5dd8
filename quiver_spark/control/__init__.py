"""The control plane over a root's objects (ARCHITECTURE.md §2): leases with epoch
fencing (:mod:`.lease`) and per-partition manifests (:mod:`.manifest`, kept by
:mod:`.manifest_store`), written once for every kind of root."""

from __future__ import annotations
