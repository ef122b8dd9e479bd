"""The only code that talks to the world: the Kubernetes API (official client) and NVML (pynvml).

The ``kubernetes`` package is registered here with its eager sub-package imports deferred
(:mod:`.k8s_package`), before any provider module imports from it.
"""

from gpuplan.providers.k8s_package import defer_package_init

defer_package_init()
