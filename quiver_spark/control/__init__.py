"""The control plane: objects a store coordinates through (leases, manifests)."""
