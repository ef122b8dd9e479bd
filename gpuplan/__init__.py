"""gpuplan: plan, apply and drift-check the NVIDIA GPU software stack on Kubernetes.

The CLI lives in :mod:`gpuplan.cli`; the engine in :mod:`gpuplan.planner`, :mod:`gpuplan.modules`,
:mod:`gpuplan.providers` and :mod:`gpuplan.state`; the simulated cluster in :mod:`gpuplan.sim`.
This module imports nothing heavy, so ``gpuplan --help`` stays instant: the version is a constant here, the
one place it is written (pyproject.toml reads it from here when the package is built).
"""

from __future__ import annotations

__version__ = "0.1.0"


def version() -> str:
    """The running gpuplan's version."""
    return __version__
