"""What the ``gpuplan`` group hands every command: the global options, read from ``click``'s ``ctx.obj``.

Kept apart from :mod:`gpuplan.cli` so that commands (a lower layer) never import the CLI entry point.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Globals:
    """Options every command may need, set once on the group."""

    kubeconfig: str | None
    context: str | None
    color: bool


def self_command(*args: str) -> list[str]:
    """The argv that runs gpuplan itself in a child process: the installed package, whatever the working
    directory. ``-P`` keeps the current folder off the child's ``sys.path``; without it, a child started in a
    checkout (which has a ``gpuplan/`` folder of its own, without the mapped planner/, providers/, ...) would
    import that folder instead and fail."""
    import sys

    return [sys.executable, "-P", "-m", "gpuplan", *args]
