"""Where the real control plane's programs are: ``--kube-bin``, then ``$GPUPLAN_KUBE_BIN``, then the folder
``controlplane/build`` fills by default."""

from __future__ import annotations

import os
from pathlib import Path

from gpuplan.errors import GpuplanError

KUBE_VERSION = "v1.37.2"
PROGRAMS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ENV = "GPUPLAN_KUBE_BIN"


class MissingBinaries(GpuplanError):
    """The folder lacks a control-plane program, or one is not executable."""


def default_folder() -> Path:
    """``controlplane/build``'s default output folder (it honours ``$XDG_CACHE_HOME`` the same way)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpuplan" / "kube" / KUBE_VERSION


def folder(explicit: str | Path | None = None) -> Path:
    """The folder to run from: ``explicit``, else ``$GPUPLAN_KUBE_BIN``, else :func:`default_folder`."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(ENV)
    return Path(from_env) if from_env else default_folder()


def find(explicit: str | Path | None = None) -> dict[str, Path]:
    """Each program's path in the chosen folder; :class:`MissingBinaries` names the first one missing."""
    where = folder(explicit)
    found: dict[str, Path] = {}
    for name in PROGRAMS:
        path = where / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MissingBinaries(
                f"{path}: no executable {name} in the control plane's folder",
                hint=(
                    "build them with controlplane/build (prints the folder), or pass --kube-bin DIR "
                    f"(or set {ENV}) to a folder holding {', '.join(PROGRAMS)} "
                    "(Kubernetes' envtest downloads hold all four)"
                ),
            )
        found[name] = path
    return found


def available(explicit: str | Path | None = None) -> bool:
    """Whether :func:`find` would succeed (tests of the real control plane are skipped otherwise)."""
    try:
        find(explicit)
    except MissingBinaries:
        return False
    return True
