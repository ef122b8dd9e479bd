"""The driver's node-by-node rollout, its per-node steps and gate, and the GPU pods it evicts."""
