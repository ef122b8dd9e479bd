"""`gpuplan demo` runs its tour on the built-in lab and ends by itself."""

from __future__ import annotations

import subprocess
import sys


def test_demo_tours_the_lab_and_exits_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "gpuplan", "demo"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "1 x NVIDIA GeForce RTX 3060" in out
    assert "NVIDIA driver:    580.105.08 (installed on the host" in out
    assert "Runtimes:         nvidia, runc" in out
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset" in out
    assert "Running, ready 1/1" in out
    assert "advertises nvidia.com/gpu = 1" in out
    assert "later versions of this tour" in out
    assert "Traceback" not in result.stderr
