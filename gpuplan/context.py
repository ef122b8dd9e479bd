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

    from gpuplan.planner.spec.model import StateSettings
    from gpuplan.providers.kubernetes import KubernetesProvider
    from gpuplan.providers.kubernetes_live import LiveReader
    from gpuplan.providers.kubernetes_write import KubernetesWriter
    from gpuplan.state.backend import StateStore
    from gpuplan.state.location import Location


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


def state_backend(spec_file: Path | None, state_path: Path | str | None) -> StateStore:
    """The state of ``-f SPEC`` / ``--state PATH|URL`` (design §3.2, §7.2): ``--state`` wins (with the spec's
    ``leaseDurationSeconds``), else the spec's ``spec.state``, else ``gpuplan.state.json`` beside the spec.
    A ``kubernetes://`` state is reached with the group's ``--kubeconfig`` / ``--context``; a URL gpuplan does
    not understand is a StateError."""
    return open_location(state_location(spec_file, state_path))


def state_location(spec_file: Path | None, state_path: Path | str | None) -> Location:
    """Where the state of ``-f SPEC`` / ``--state`` lives (see :func:`state_backend`)."""
    from gpuplan.state.local import default_state_path
    from gpuplan.state.location import DEFAULT_LEASE_SECONDS, parse_location

    settings = _spec_state(spec_file)
    if state_path is not None:
        # the spec's lease duration holds for the URL too: a team's runs agree on it through the spec
        lease = settings.lease_duration_seconds if settings is not None else DEFAULT_LEASE_SECONDS
        return parse_location(str(state_path), lease_seconds=lease)
    if settings is not None and settings.backend == "kubernetes":
        from gpuplan.state.location import kubernetes_location

        assert settings.namespace is not None and settings.name is not None  # the spec model checks both
        return kubernetes_location(
            settings.namespace, settings.name, lease_seconds=settings.lease_duration_seconds
        )
    return default_state_path(spec_file)


def open_location(location: Location) -> StateStore:
    """The backend of ``location``: the file backend, or the cluster one on the group's kubeconfig."""
    from gpuplan.state.location import KubernetesLocation

    if isinstance(location, KubernetesLocation):
        import click

        from gpuplan.providers.state_secret import KubernetesStateBackend

        ctx = click.get_current_context(silent=True)
        options = Globals.of(ctx) if ctx is not None else Globals(kubeconfig=None, context=None, color=True)
        return KubernetesStateBackend(location, kubeconfig=options.kubeconfig, context=options.context)
    from gpuplan.state.local import LocalFileBackend

    return LocalFileBackend(location)


def _spec_state(spec_file: Path | None) -> StateSettings | None:
    """The spec's ``spec.state``; None without a spec or without the key. Only a spec that has the key is
    validated here (with its file:line:column errors): ``gpuplan state`` reads a state beside a spec it has
    no other use for, whatever else that spec holds."""
    if spec_file is None or not spec_file.is_file():
        return None
    from gpuplan.errors import ConfigError
    from gpuplan.planner.spec import yamlpos
    from gpuplan.planner.spec.model import load_spec, read_spec_text

    try:  # the spec's own guarded loader (size and alias checks); its errors are the command's to report
        document, _ = yamlpos.load(read_spec_text(spec_file), filename=str(spec_file))
    except ConfigError:
        return None
    section = document.get("spec") if isinstance(document, dict) else None
    if not isinstance(section, dict) or "state" not in section:
        return None
    return load_spec(spec_file).spec.state


def self_command(*args: str) -> list[str]:
    """The argv that runs gpuplan itself in a child process: the installed package, whatever the working
    directory. ``-P`` keeps the current folder off the child's ``sys.path``; without it, a child started in a
    checkout (which has a ``gpuplan/`` folder of its own, without the mapped planner/, providers/, ...) would
    import that folder instead and fail."""
    import sys

    return [sys.executable, "-P", "-m", "gpuplan", *args]
