"""gpuplan: plan, apply and drift-check the NVIDIA GPU software stack on Kubernetes.

The CLI lives in :mod:`gpuplan.cli`; the engine in :mod:`gpuplan.planner`, :mod:`gpuplan.modules`,
:mod:`gpuplan.providers` and :mod:`gpuplan.state`; the simulated cluster in :mod:`gpuplan.sim`.
This module imports nothing heavy, so ``gpuplan --help`` stays instant.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("gpuplan")
except _metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"
