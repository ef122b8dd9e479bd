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
