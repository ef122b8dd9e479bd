"""The state file: model, format migrations, backends and locking."""
