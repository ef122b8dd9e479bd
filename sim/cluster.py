"""The Simulator: a scenario turned into a running simulated GPU cluster with a real Kubernetes API.

``Simulator(scenario)`` builds, on ``start()``: the store (``gpuplan.sim.api.store``, which seeds the
namespaces every cluster has), one Node per scenario node (``gpuplan.sim.nodes.node_object``), its
NodeFeature where NFD runs (``gpuplan.sim.nfd``), each with a simulated kubelet
(``gpuplan.sim.kubelet.runtime``), the scenario's objects (CustomResourceDefinitions and Namespaces first,
then the rest in file order, created as ``kubectl-create`` would: a hand-deployed device plugin is just
there), the DaemonSet and endpoints controllers, the scheduler and node lifecycle
(``gpuplan.sim.controllers``) on one loop thread, and the HTTP(S) API server (``gpuplan.sim.api.server``)
with the pod and service proxies and the ``/sim/v1/`` control API (``gpuplan.sim.control``). ``stop()`` ends
every thread and every pod process it started.

Callers: ``gpuplan sim start`` and ``gpuplan demo`` (gpuplan.commands), the pytest fixtures of
``gpuplan.sim.testing``, benchmarks/sim_fleet.py. Tests use ``store`` to look inside, ``wait_idle`` /
``wait_for`` instead of sleeping, and the Python API (``set_image_fault``, ``set_node_ready``, ...) to inject
faults, which the control API exposes over HTTP too.
"""

from __future__ import annotations

import errno
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.sim import nfd, scenario_objects
from gpuplan.sim import nodes as node_objects
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.api import certs
from gpuplan.sim.api import faults as faults_mod
from gpuplan.sim.api import server as server_mod
from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.tokens import Tokens
from gpuplan.sim.control import Control
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.controllers.cron import BatchClock
from gpuplan.sim.controllers.cronjobs import CronJobController
from gpuplan.sim.controllers.daemonset import DaemonSetController
from gpuplan.sim.controllers.endpoints import EndpointsController
from gpuplan.sim.controllers.jobs import JobController
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.nodes import NodeLifecycle
from gpuplan.sim.controllers.scheduler import Scheduler
from gpuplan.sim.controllers.serviceaccounts import NamespaceDefaults
from gpuplan.sim.kubelet import exec as exec_mod
from gpuplan.sim.kubelet import ports
from gpuplan.sim.kubelet import runtime as runtime_mod
from gpuplan.sim.kubelet.pod_network import PodNetwork
from gpuplan.sim.kubelet.state import NodeGpuState

OBJECTS_MANAGER = "kubectl-create"
NODE_MANAGER = "kubelet"


class SimulatorError(GpuplanError):
    """The simulator cannot start as asked: a bad scenario object, a port in use, ..."""


class Simulator:
    """A simulated GPU cluster in this process. Use as a context manager or call start() / stop()."""

    def __init__(
        self,
        scenario: scenario_mod.Scenario | str | dict[str, Any],
        *,
        port: int = 0,
        tls: bool = True,
        token: str | None = None,
        serve: bool = True,
    ) -> None:
        self.scenario, self.scenario_name = _scenario(scenario)
        self.port = port
        self.tls = tls
        self.serve = serve  # False: no API server (runtime tests that drive the store directly)
        self.token = token or secrets.token_urlsafe(32)
        self.store = store_mod.Store(Registry.builtin())
        self.loop = Loop(self.store)
        # The CA exists before the server does: kube-root-ca.crt publishes it into every namespace.
        self._certs = certs.generate() if tls else None
        self.tokens = Tokens(self.store, admin_token=self.token)
        self.namespace_defaults = NamespaceDefaults(
            self.loop, lambda: self._certs.ca_pem if self._certs else b""
        )
        timing = self.scenario.timing
        self.runtime = runtime_mod.KubeletRuntime(
            self.loop,
            timing=runtime_mod.Timing(
                timing.podReadySeconds,
                timing.imagePullSeconds,
                timing.crashLoopBackoffSeconds,
                mig_reconfigure_seconds=timing.migReconfigureSeconds,
            ),
            faults=runtime_mod.Faults(
                dict(self.scenario.faults.images), dict(self.scenario.faults.slowImages)
            ),
        )
        self.runtime.declared_ports = tuple(
            ports.DeclaredPort(p.image, p.port, p.path, p.status, p.contentType, p.body)
            for p in self.scenario.ports
        )
        self.pod_network = PodNetwork(self.runtime)
        self.daemonsets = DaemonSetController(
            self.loop, rollout_step_seconds=timing.daemonSetRolloutStepSeconds
        )
        self.scheduler = Scheduler(self.loop)
        self.endpoints = EndpointsController(self.loop)
        self.clock = BatchClock(timing.batchClockSpeed)  # the Job and CronJob controllers' wall clock
        self.jobs = JobController(self.loop, self.clock)
        self.cronjobs = CronJobController(self.loop, self.clock)
        self.lifecycle = NodeLifecycle(self.loop, self.runtime)
        self.api_faults = faults_mod.ApiFaults.from_spec(self.scenario.faults.api)
        self.control = Control(self)
        self._server: server_mod.ApiServer | None = None
        self._started_at: float | None = None
        self._not_ready: set[str] = set()
        self._lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Simulator:
        self.loop.add_handler(self.namespace_defaults)
        self.loop.add_handler(self.daemonsets)
        self.loop.add_handler(self.scheduler)
        self.loop.add_handler(self.endpoints)
        self.loop.add_handler(self.cronjobs)
        self.loop.add_handler(self.jobs)
        self.loop.add_handler(self.runtime)
        self.loop.add_handler(self.pod_network)
        self.loop.subscribe()
        try:
            if self.serve:
                self.pod_network.start()  # before any pod gets an IP
            for node in scenario_mod.expand_nodes(self.scenario):
                self._register_node(node)
            self._create_objects(self.scenario.objects)
            self.loop.start()
            self._apply_scenario_faults()
            if not self.serve:
                self._started_at = time.monotonic()
                return self
            self._server = server_mod.ApiServer(
                self.store,
                token=self.token,
                port=self.port,
                tls=self.tls,
                faults=self.api_faults,
                proxy=self._proxy,
                control=self.control.handle,
                kubelet=exec_mod.KubeletStreams(
                    self.runtime.logs,
                    self.runtime.states,
                    self.loop.run_sync,
                    self.runtime.wall_clock,
                    self.runtime.down,
                ),
                tokens=self.tokens,
                certificates=self._certs,
            )
            self._server.start()
            self.runtime.processes.serve(
                port=self._server.port, ca_pem=self.ca_pem or b"", issue_token=self._issue_token
            )
        except OSError as exc:
            self.stop()
            if exc.errno == errno.EADDRINUSE:
                raise SimulatorError(
                    f"port {self.port} is already in use",
                    hint="choose another --port, or omit it to use a free one",
                ) from None
            raise
        except BaseException:
            self.stop()
            raise
        self._started_at = time.monotonic()
        return self

    def stop(self) -> None:
        self.runtime.processes.close()
        self.pod_network.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        self.loop.stop()
        self.store.close()

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise SimulatorError("the simulator is not running")
        return str(self._server.url)

    @property
    def ca_pem(self) -> bytes | None:
        return self._server.ca_pem if self._server is not None and self.tls else None

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised inside controllers or kubelets (logged; tests assert there are none)."""
        return list(self.loop.errors)

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig (mode 0600) for kubectl and the Python client: server, CA, bearer token."""
        target = Path(path)
        server_mod.write_kubeconfig(target, self.url, self.token, ca_pem=self.ca_pem)
        target.chmod(0o600)
        return target

    # -- waiting -------------------------------------------------------------------------------------
    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every write was handled and no pod is still on its way to its first outcome
        (crash-loop restarts do not count). False if ``timeout`` passed first."""
        return self.loop.wait_idle(timeout, horizon=float("inf"))

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` is true, checking after each loop pass. False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.loop.wait_pass(min(remaining, 0.25))

    # -- Python API (also behind /sim/v1) ------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        uptime = 0.0 if self._started_at is None else time.monotonic() - self._started_at
        return {
            "kind": "SimulatorStatus",
            "scenario": self.scenario_name,
            "url": self.url if self._server is not None else None,
            "nodes": len(self.runtime.states),
            "uptimeSeconds": round(uptime, 1),
        }

    def faults(self) -> dict[str, Any]:
        def collect() -> dict[str, Any]:
            gpus = [
                {"node": node, "gpu": index, **fault.model_dump(exclude={"node", "gpu"}, exclude_none=True)}
                for node, state in sorted(self.runtime.states.items())
                for index, fault in sorted(state.gpu_faults.items())
            ]
            return {
                "images": dict(self.runtime.faults.images),
                "slowImages": dict(self.runtime.faults.slow_images),
                "api": self.api_faults.to_spec(),
                "gpus": gpus,
                "nodes": [{"node": n, "notReady": True} for n in sorted(self.runtime.down)],
            }

        return self.loop.run_sync(collect)

    def set_image_fault(self, image: str, kind: str | None) -> None:
        """Pods running ``image`` fail with ``kind`` (CrashLoopBackOff, ImagePullBackOff, ErrImagePull,
        RunContainerError) from now on; ``None`` heals them."""
        if kind is not None and kind not in _IMAGE_FAILURES:
            raise ValueError(f"unknown image fault {kind!r}; valid: {', '.join(sorted(_IMAGE_FAILURES))}")

        def apply() -> None:
            if kind is None:
                self.runtime.faults.images.pop(image, None)
            else:
                self.runtime.faults.images[image] = kind
            self.runtime.reevaluate(lambda record: image in record.images)

        self.loop.run_sync(apply)

    def set_slow_image(self, image: str, seconds: float | None) -> None:
        """Pods of ``image`` created from now on take ``seconds`` longer to start (a slow rollout)."""

        def apply() -> None:
            if seconds is None:
                self.runtime.faults.slow_images.pop(image, None)
            else:
                self.runtime.faults.slow_images[image] = float(seconds)

        self.loop.run_sync(apply)

    def set_api_faults(self, **kwargs: Any) -> None:
        """Change the API faults (error_rate, codes, latency_ms, drop_rate, lost_response_rate,
        retry_after_seconds, seed)."""
        self.api_faults.update(**kwargs)

    def clear_api_faults(self) -> None:
        self.api_faults.update(
            error_rate=0.0, codes=(500,), latency_ms=0, drop_rate=0.0, lost_response_rate=0.0
        )

    def set_gpu_fault(self, node: str, gpu: int, **kwargs: Any) -> None:
        """GPU ``gpu`` of ``node`` reports ``temperature``, ``xid`` and/or ``utilization`` in its metrics."""
        fault = scenario_mod.GpuFault(node=node, gpu=gpu, **kwargs)

        def apply() -> None:
            state = self._state(node)
            if gpu >= len(state.gpus):
                raise ValueError(f"node {node} has {len(state.gpus)} GPU(s); no GPU {gpu}")
            state.gpu_faults[gpu] = fault

        self.loop.run_sync(apply)

    def clear_gpu_faults(self, node: str | None = None) -> None:
        def apply() -> None:
            for name, state in self.runtime.states.items():
                if node is None or name == node:
                    state.gpu_faults.clear()

        self.loop.run_sync(apply)

    def set_host_driver(self, node: str, version: str) -> None:
        """Node ``node``'s host driver is now ``version``, as an upgrade outside the cluster leaves it (a
        package upgrade and a reboot): NVML reports it there from now on, so GFD relabels the node."""

        def apply() -> None:
            self._state(node).host_driver = version
            self.runtime.reevaluate(lambda record: record.node == node)

        self.loop.run_sync(apply)

    def set_node_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> None:
        """Node ``name`` goes NotReady (its kubelet stops; ``unreachable`` or reporting KubeletNotReady)
        or Ready again."""
        self.loop.run_sync(lambda: self.lifecycle.set_ready(name, ready, unreachable=unreachable))

    def add_node(self, spec: scenario_mod.NodeSpec | dict[str, Any]) -> list[str]:
        """Nodes joining the cluster (a NodeSpec: ``name`` or ``namePrefix`` + ``count``); their names."""
        node_spec = (
            spec if isinstance(spec, scenario_mod.NodeSpec) else scenario_mod.NodeSpec.model_validate(spec)
        )
        existing = set(self.runtime.states)
        concrete = scenario_mod.expand_nodes(scenario_mod.Scenario(nodes=[node_spec]))
        taken = [n.name for n in concrete if n.name in existing]
        if taken:
            raise store_mod.ApiError(409, "AlreadyExists", f'nodes "{taken[0]}" already exists')
        return self.loop.run_sync(lambda: [self._register_node(n) for n in concrete])

    def remove_node(self, name: str) -> None:
        """Node ``name`` leaves the cluster (its DaemonSet pods go with it)."""
        self.store.delete(resource_type(self.store.registry, "v1", "Node"), None, name)
        nfd.forget(self.store, name)

    def run_cronjob(self, namespace: str, name: str, job: str | None = None) -> dict[str, Any]:
        """A Job from CronJob ``namespace/name``'s template now, as ``kubectl create job --from`` makes it."""
        return self.loop.run_sync(lambda: self.cronjobs.run_now(namespace, name, job))

    def batch_clock(self) -> dict[str, Any]:
        return {"kind": "BatchClock", "now": self.clock.now().isoformat(), "speed": self.clock.speed}

    def advance_batch_clock(self, seconds: float) -> dict[str, Any]:
        """Move the Job and CronJob controllers' clock on by ``seconds`` (it stands still from then on) and
        let them look at every Job and CronJob again."""

        def advance() -> None:
            self.clock.advance(seconds)
            self.cronjobs.resync()
            self.jobs.resync()

        self.loop.run_sync(advance)
        return self.batch_clock()

    # -- internals -----------------------------------------------------------------------------------
    def _issue_token(self, namespace: str, service_account: str, pod: dict[str, Any]) -> str:
        """The projected service-account token of a pod that really runs: bound to the pod, so it stops
        working when the pod is deleted, and subject to the account's RBAC."""
        return self.tokens.issue(namespace, service_account, pod=pod)

    def _state(self, node: str) -> NodeGpuState:
        state = self.runtime.states.get(node)
        if state is None:
            raise store_mod.ApiError(404, "NotFound", f'nodes "{node}" not found')
        return state

    def _register_node(self, node: scenario_mod.ConcreteNode) -> str:
        self.runtime.add_state(NodeGpuState(node))
        obj = node_objects.node_object(node, now=datetime.now(UTC))
        self.store.create(resource_type(self.store.registry, "v1", "Node"), obj, manager=NODE_MANAGER)
        if node.nfd:
            nfd.publish(self.store, node)
        return node.name

    def _create_objects(self, objects: list[dict[str, Any]]) -> None:
        first = ("CustomResourceDefinition", "Namespace")
        ordered = sorted(
            enumerate(objects),
            key=lambda item: (
                first.index(item[1].get("kind")) if item[1].get("kind") in first else len(first),
                item[0],
            ),
        )
        created: scenario_objects.Created = {}
        for index, obj in ordered:
            self._create_object(index, obj, created)

    def _create_object(self, index: int, obj: dict[str, Any], created: scenario_objects.Created) -> None:
        meta = obj.get("metadata") or {}
        what = (
            f"objects[{index}] ({obj.get('kind')} "
            f"{meta.get('namespace', '') + '/' if meta.get('namespace') else ''}"
            f"{meta.get('name')})"
        )
        rt = self.store.registry.for_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
        if rt is None:
            raise SimulatorError(
                f"the simulator serves no {obj.get('apiVersion')} {obj.get('kind')}",
                where=f"scenario {self.scenario_name} {what}",
                hint="define its CustomResourceDefinition in the same scenario's objects",
            )
        namespace = (meta.get("namespace") or "default") if rt.namespaced else None
        try:
            scenario_objects.create(self.store, rt, obj, namespace, created, manager=OBJECTS_MANAGER)
        except KeyError as exc:
            raise SimulatorError(
                str(exc.args[0]), where=f"scenario {self.scenario_name} {what}", hint="list the owner first"
            ) from None
        except store_mod.ApiError as exc:
            raise SimulatorError(
                f"could not be created: {exc.message}",
                where=f"scenario {self.scenario_name} {what}",
                hint="add the Namespace it needs, or fix the manifest",
            ) from None

    def _apply_scenario_faults(self) -> None:
        for fault in self.scenario.faults.nodes:
            self.set_node_ready(fault.node, not fault.notReady)
        for gpu_fault in self.scenario.faults.gpus:
            state = self._state(gpu_fault.node)
            indexes = range(len(state.gpus)) if gpu_fault.gpu is None else [gpu_fault.gpu]
            values = gpu_fault.model_dump(exclude={"node", "gpu"}, exclude_none=True)
            for index in indexes:
                self.set_gpu_fault(gpu_fault.node, index, **values)

    def _proxy(self, pod: dict[str, Any], port: int | None, path: str, query: str) -> tuple[int, str, bytes]:
        if port is None:
            ports = [
                p.get("containerPort")
                for c in pod.get("spec", {}).get("containers") or []
                for p in c.get("ports") or []
            ]
            port = int(ports[0]) if ports else 80
        chosen = port
        return self.loop.run_sync(lambda: self.runtime.serve_proxy(pod, chosen, path or "/"))


_IMAGE_FAILURES = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "RunContainerError"})


def _scenario(value: scenario_mod.Scenario | str | dict[str, Any]) -> tuple[scenario_mod.Scenario, str]:
    if isinstance(value, scenario_mod.Scenario):
        return value, "custom"
    if isinstance(value, dict):
        try:
            return scenario_mod.Scenario.model_validate(value), "custom"
        except ValueError as exc:
            raise SimulatorError("invalid scenario", detail=str(exc)) from None
    return scenario_mod.load_scenario(value), Path(value).stem if value.endswith((".yaml", ".yml")) else value
