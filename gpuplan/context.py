"""What the ``gpuplan`` group hands every command: the global options, read from ``click``'s ``ctx.obj``, and
the clients and state backend they open.

Kept apart from :mod:`gpuplan.cli` so that commands (a lower layer) never import the CLI entry point. The
providers are imported inside the methods, so ``gpuplan --help`` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from gpuplan.providers.kubernetes import KubernetesProvider
    from gpuplan.providers.kubernetes_live import LiveReader
    from gpuplan.providers.kubernetes_write import KubernetesWriter
    from gpuplan.state.local import LocalFileBackend


@dataclass(frozen=True)
class Globals:
    """Options every command may need, set once on the group, and what they open: each client on the
    cluster and context ``--kubeconfig`` / ``--context`` name."""

    kubeconfig: str | None
    context: str | None
    color: bool

    @classmethod
    def of(cls, ctx: click.Context) -> Globals:
        """The group's global options; defaults when the command runs without the group."""
        obj = ctx.find_root().obj
        return obj if isinstance(obj, Globals) else cls(kubeconfig=None, context=None, color=True)

    def reader(self) -> KubernetesProvider:
        """The read-only client of ``plan``, ``drift``, ``import`` and ``inventory``."""
        from gpuplan.providers.kubernetes import KubernetesProvider

        return KubernetesProvider(kubeconfig=self.kubeconfig, context=self.context)

    def live_reader(self) -> LiveReader:
        """A reader of its own, for one scrape thread (a client is not thread-safe) or the eviction lists."""
        from gpuplan.providers.kubernetes_live import LiveReader

        return LiveReader(kubeconfig=self.kubeconfig, context=self.context)

    def writer(self) -> KubernetesWriter:
        """The client that changes the cluster (``apply``, ``rollback``; one per apply worker)."""
        from gpuplan.providers.kubernetes_write import KubernetesWriter

        return KubernetesWriter(kubeconfig=self.kubeconfig, context=self.context)


def state_backend(spec_file: Path | None, state_path: Path | None) -> LocalFileBackend:
    """The state of ``-f SPEC`` / ``--state PATH``: ``--state`` wins, else ``gpuplan.state.json`` beside the
    spec."""
    from gpuplan.state.local import LocalFileBackend, resolve_state_path

    return LocalFileBackend(resolve_state_path(state_path, spec_file))


def self_command(*args: str) -> list[str]:
    """The argv that runs gpuplan itself in a child process: the installed package, whatever the working
    directory. ``-P`` keeps the current folder off the child's ``sys.path``; without it, a child started in a
    checkout (which has a ``gpuplan/`` folder of its own, without the mapped planner/, providers/, ...) would
    import that folder instead and fail."""
    import sys

    return [sys.executable, "-P", "-m", "gpuplan", *args]
