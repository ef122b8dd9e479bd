"""The stack spec: its model and loader, positions and problems, telemetry settings, compatibility rules."""
