"""Shared test set-up. Area-specific fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import pytest

pytest_plugins = ["gpuplan.sim.testing"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the developer's real kubeconfig or kubectl cache."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECACHEDIR", str(home / ".kube" / "cache"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
