"""One click command (or group) per module; :mod:`gpuplan.cli` loads them lazily by name."""
