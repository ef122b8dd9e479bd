"""Shared test set-up. Area-specific fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# importlib mode keeps tests/ off sys.path; the shared test helpers (lab_stack, installed_layout) live there
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["gpuplan.sim.testing"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the developer's real kubeconfig or kubectl cache."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECACHEDIR", str(home / ".kube" / "cache"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
