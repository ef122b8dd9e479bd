"""Owned-field diffs: normalisation of server objects, the deepdiff wrapper, and the write guard."""
