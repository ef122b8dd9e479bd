"""Fixtures for the API server tests: a Store + ApiServer on a free port, a kubeconfig, kubectl and clients.

The full Simulator fixture (controllers, kubelets) is :mod:`gpuplan.sim.testing`; these tests need only the
HTTP face over a bare store, with Node and Pod objects written as plain dicts (``server_kit``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.api.faults import ApiFaults
from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.server import ApiServer, write_kubeconfig
from gpuplan.sim.api.store import Store

# pytest's importlib mode does not put test folders on sys.path; the test modules import server_kit.
sys.path.insert(0, str(Path(__file__).parent))

from server_kit import KUBECTL, TOKEN, ControlCalls, ProxyCalls, Raw, Recorder  # noqa: E402

KubectlFn = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


@pytest.fixture
def sleeps() -> Recorder:
    return Recorder([])


@pytest.fixture
def faults(sleeps: Recorder) -> ApiFaults:
    return ApiFaults(seed=7, sleep=sleeps)


@pytest.fixture
def proxy_calls() -> ProxyCalls:
    return ProxyCalls([])


@pytest.fixture
def control_calls() -> ControlCalls:
    return ControlCalls([])


@pytest.fixture
def api(
    store: Store, faults: ApiFaults, proxy_calls: ProxyCalls, control_calls: ControlCalls
) -> Iterator[ApiServer]:
    server = ApiServer(store, token=TOKEN, faults=faults, proxy=proxy_calls, control=control_calls)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(api: ApiServer, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", api.url, TOKEN, api.ca_pem)


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> KubectlFn:
    """Run the real kubectl against the server; returns the CompletedProcess (text); ``check`` by default."""

    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [
            str(KUBECTL),
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(tmp_path / "kcache"),
            *args,
        ]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    return run


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[Any]:
    """An ApiClient of the official Python client, configured only from the kubeconfig."""
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()
    api_client.rest_client.pool_manager.clear()


@pytest.fixture
def raw(api: ApiServer) -> Raw:
    return Raw(api)
