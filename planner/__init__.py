"""The engine: dependency graph, refresh, diff, plan, apply walker and rollback.

Sits below the CLI and above modules/providers/state (design §2); never talks to the cluster itself.
"""
