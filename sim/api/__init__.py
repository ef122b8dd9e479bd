"""The simulated Kubernetes API: resource registry, object store (CRUD, patch, watch, managedFields),
selectors, and the HTTP server that exposes them. See docs/sim-internals.md for how the parts fit together."""
