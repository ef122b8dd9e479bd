"""Running ``gpuplan`` as a process against the lab, interrupting it, and checking what it left behind.

Shared by the apply e2e tests (test_apply_crash, test_apply_interrupt, test_apply_resume). A plain module:
pytest runs with ``--import-mode=importlib``, so test modules cannot import conftest; ``conftest.py`` puts
this folder on ``sys.path`` and builds the ``lab_writer`` fixture from it.

- :func:`gpuplan` runs one command to its end (``env`` adds variables, e.g. ``GPUPLAN_TEST_KILL_AT``).
- :class:`ApplyProcess` starts ``gpuplan apply --auto-approve`` in the background, reads its ``--json``
  events until one matches, signals it (SIGKILL, SIGINT, SIGTERM) and collects the rest; leaving the ``with``
  block kills a process still running, so no test leaks one.
- :func:`upgrade4_running` starts the four-node ``upgrade4`` scenario with a spec's objects already running
  (the driver tests' starting point: an old driver in place, not yet in any state).
- :func:`state_of`, :func:`stack_objects` and :func:`assert_everything_accounted_for` read what is left: the
  state file beside the spec, and the stack's labelled objects in the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml
from lab_stack import LAB_BLOCK_HEADER

from gpuplan.planner.spec.model import Spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.document import parse_state

HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
"""The lab's hand-made device plugin; deleted first so gpuplan's plan has no conflict to resolve."""

LAB_SPEC = LAB_BLOCK_HEADER
"""The lab's stack with the host's driver and toolkit; tests append component sections to it."""

STACK_KINDS = [
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "ConfigMap"),
    ("apps/v1", "DaemonSet"),
    ("v1", "Service"),
    ("node.k8s.io/v1", "RuntimeClass"),
]
"""Every kind gpuplan makes for the lab's stack."""

COMMAND_TIMEOUT_S = 120.0


def gpuplan_command(kubeconfig: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args]


def gpuplan(
    kubeconfig: Path, *args: str, env: dict[str, str] | None = None, timeout: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``gpuplan --kubeconfig KUBECONFIG ARGS...`` run to its end, its output captured."""
    return subprocess.run(
        gpuplan_command(kubeconfig, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


class ApplyProcess:
    """``gpuplan apply -f SPEC --auto-approve [--json]`` in the background, for a test to interrupt.

    With ``events`` (the default) it runs with ``--json`` and :meth:`wait_for` reads its event stream;
    without, its output is discarded (for a test that only kills it after a delay)."""

    def __init__(self, kubeconfig: Path, spec: Path, *args: str, events: bool = True) -> None:
        command = gpuplan_command(kubeconfig, "apply", "-f", str(spec), "--auto-approve", *args)
        output = subprocess.PIPE if events else subprocess.DEVNULL
        self.process = subprocess.Popen(
            command + (["--json"] if events else []), stdout=output, stderr=output, text=True
        )
        self.rest = ""
        self.stderr = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def wait_for(self, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first JSON event ``matches`` accepts (the events before it are read and dropped)."""
        for event in self._events(self._stdout()):
            if matches(event):
                return event
        raise AssertionError(f"gpuplan apply ended (exit {self.process.wait()}) before the awaited event")

    def send(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill_after(self, seconds: float) -> None:
        """SIGKILL once ``seconds`` pass, unless the apply ended first."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)

    def finish(self, timeout: float = COMMAND_TIMEOUT_S) -> int:
        """Wait for the end; the exit status. The output not read yet lands in ``rest`` and ``stderr``."""
        rest, err = self.process.communicate(timeout=timeout)
        self.rest, self.stderr = rest or "", err or ""
        return self.process.returncode

    def rest_events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.rest.splitlines() if line.startswith("{")]

    def __enter__(self) -> ApplyProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()  # reaps it and closes the pipes (an open pipe is a ResourceWarning)

    def _stdout(self) -> IO[str]:
        assert self.process.stdout is not None, "an ApplyProcess started with events=False has no events"
        return self.process.stdout

    @staticmethod
    def _events(stream: IO[str]) -> Iterator[dict[str, Any]]:
        for line in stream:
            if line.startswith("{"):
                yield json.loads(line)


def state_of(spec: Path) -> dict[str, Any]:
    """The state file beside ``spec``, as JSON."""
    state: dict[str, Any] = json.loads((spec.parent / "gpuplan.state.json").read_text())
    return state


def stack_objects(writer: KubernetesWriter, stack: str = "lab") -> set[str]:
    """The refs of every object labelled as the stack's."""
    found = set()
    for api_version, kind in STACK_KINDS:
        for obj in writer.list_objects(api_version, kind, label_selector=f"gpuplan.io/stack={stack}"):
            found.add(obj.key.ref)
    return found


def assert_everything_accounted_for(spec: Path, writer: KubernetesWriter) -> None:
    """The state file is valid, and every object of the stack that exists is in its records or journal."""
    state_path = spec.parent / "gpuplan.state.json"
    if not state_path.exists():
        assert stack_objects(writer) == set()
        return
    state = parse_state(state_path.read_bytes(), source=str(state_path))  # valid, or this raises
    known = set()
    for record in state.resources.values():
        known.add(ObjectKey(record.api_version, record.kind, record.namespace, record.name).ref)
    for entry in state.journal:
        for manifest in (entry.before, entry.after):
            if manifest:
                known.add(ObjectKey.of(manifest).ref)
    missing = stack_objects(writer) - known
    assert not missing, f"objects in neither the state nor its journal: {sorted(missing)}"


RESUME_TIMEOUT_S = 270.0
"""How long the apply that follows a killed one may take: a validator pod the killed apply started before the
stack under it was ready crash-loops, and the kubelet's back-off (10 s doubling, up to 5 min) can hold it
past COMMAND_TIMEOUT_S on a busy machine, within the gate's own 300 s."""


def converge(spec: Path, kubeconfig: Path) -> None:
    """An apply succeeds and the plan after it has no changes."""
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=RESUME_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr


def upgrade4_running(sim_factory: SimFactory, spec: Spec) -> Simulator:
    """``upgrade4`` with ``spec``'s namespace and objects created with the scenario, settled (plain HTTP)."""
    data = yaml.safe_load(scenario_mod.load_scenario("upgrade4").model_dump_json(exclude_none=True))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": spec.spec.namespace}}
    data["objects"] = [namespace, *(dict(o.manifest) for o in spec.desired_objects())]
    sim = sim_factory(data, tls=False)
    assert sim.wait_idle(30)
    return sim
