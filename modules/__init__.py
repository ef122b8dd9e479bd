"""One module per GPU stack component: config model, rendered objects, dependencies and health checks.

Rendering is pure: no I/O, no clock, no randomness.
"""
