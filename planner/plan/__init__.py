"""The plan: its value types, the per-object decision, the builder, saved plans, rollback plans."""
