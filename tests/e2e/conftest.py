"""Fixtures for the end-to-end tests on the simulated lab; the apply tests' helpers live in apply_process.py,
the recorder of a read-only command's requests in request_log.py.

pytest's importlib mode keeps test folders off ``sys.path``; this conftest puts this folder there so the test
modules can ``from apply_process import ...``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from apply_process import HAND  # noqa: E402


@pytest.fixture
def lab_writer(lab_sim: Simulator, kubeconfig: Path) -> Iterator[KubernetesWriter]:
    """A writer on the lab, whose hand-made device plugin is deleted first (so gpuplan's plan has no
    conflict to resolve); closed at teardown."""
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    try:
        writer.delete(HAND)
        yield writer
    finally:
        writer.close()
