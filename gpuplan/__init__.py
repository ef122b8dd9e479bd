"""gpuplan: plan, apply and drift-check the NVIDIA GPU software stack on Kubernetes.

The CLI lives in :mod:`gpuplan.cli`; the engine in :mod:`gpuplan.planner`, :mod:`gpuplan.modules`,
:mod:`gpuplan.providers` and :mod:`gpuplan.state`; the simulated cluster in :mod:`gpuplan.sim`.
This module imports nothing heavy, so ``gpuplan --help`` stays instant: even the version is read from the
package metadata (``importlib.metadata``, a sizeable import) only when someone asks for ``__version__``.
"""

from __future__ import annotations


def version() -> str:
    """The installed distribution's version, or ``0.0.0+unknown`` in a checkout that was never installed."""
    from importlib import metadata

    try:
        return metadata.version("gpuplan")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return version()
    raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")
