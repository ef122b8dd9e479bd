"""Health gates: their pure evaluation, the nodes a component targets, and the waiter."""
