"""The only code that talks to the world: the Kubernetes API (official client) and NVML (pynvml)."""
