"""The Simulator: a scenario turned into a running simulated GPU cluster with a real Kubernetes API.

``Simulator(scenario)`` builds, on ``start()``: the store (``gpuplan.sim.api.store``, which seeds the
namespaces every cluster has), one Node per scenario node (``gpuplan.sim.nodes.node_object``), its
NodeFeature where NFD runs (``gpuplan.sim.nfd``), each with a simulated kubelet
(``gpuplan.sim.kubelet.runtime``), the scenario's objects (CustomResourceDefinitions and Namespaces first,
then the rest in file order, created as ``kubectl-create`` would: a hand-deployed device plugin is just
there), the DaemonSet, endpoints, Job, CronJob and disruption controllers, the scheduler and node lifecycle
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
from pathlib import Path
from typing import Any

from gpuplan.sim import nfd, node_side
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
from gpuplan.sim.controllers.disruption import DisruptionController
from gpuplan.sim.controllers.endpoints import EndpointsController
from gpuplan.sim.controllers.jobs import JobController
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.nodes import NodeLifecycle
from gpuplan.sim.controllers.scheduler import Scheduler
from gpuplan.sim.controllers.serviceaccounts import NamespaceDefaults
from gpuplan.sim.kubelet import exec as exec_mod
from gpuplan.sim.kubelet.pod_network import PodNetwork
from gpuplan.sim.node_side import SimulatorError

OBJECTS_MANAGER = node_side.OBJECTS_MANAGER
NODE_MANAGER = node_side.NODE_MANAGER
__all__ = ["Simulator", "SimulatorError"]


class Simulator(node_side.NodeControls):
    """A simulated GPU cluster in this process. Use as a context manager or call start() / stop()."""

    def __init__(
        self,
        scenario: scenario_mod.Scenario | str | dict[str, Any],
        *,
        port: int = 0,
        tls: bool = True,
        token: str | None = None,
        serve: bool = True,
        kubelets: bool = True,
        event_log_size: int = 20000,
    ) -> None:
        """``kubelets=False``: the control plane only (API server, store, controllers, scheduler): no node is
        registered, no kubelet runs, none of the scenario's objects is created and only the scheduler's pod
        Events are recorded; a ``gpuplan.sim.agent.NodeAgent`` given the scenario brings its nodes over the
        API. ``event_log_size``: the store's watch history (a smaller one makes old watches 410 sooner)."""
        self.scenario, self.scenario_name = node_side.scenario_of(scenario)
        self.port = port
        self.tls = tls
        self.serve = serve  # False: no API server (runtime tests that drive the store directly)
        self.kubelets = kubelets
        self.token = token or secrets.token_urlsafe(32)
        self.store = store_mod.Store(Registry.builtin(), event_log_size=event_log_size)
        self.loop = Loop(self.store, kubelet_events=None if kubelets else (lambda node: False))
        # The CA exists before the server does: kube-root-ca.crt publishes it into every namespace.
        self._certs = certs.generate() if tls else None
        self.tokens = Tokens(self.store, admin_token=self.token)
        self.namespace_defaults = NamespaceDefaults(
            self.loop, lambda: self._certs.ca_pem if self._certs else b""
        )
        timing = self.scenario.timing
        self.runtime = node_side.kubelet_runtime(self.loop, self.scenario)
        self.pod_network = PodNetwork(self.runtime)
        self.daemonsets = DaemonSetController(
            self.loop, rollout_step_seconds=timing.daemonSetRolloutStepSeconds
        )
        self.scheduler = Scheduler(self.loop)
        self.endpoints = EndpointsController(self.loop)
        self.clock = BatchClock(timing.batchClockSpeed)  # the Job and CronJob controllers' wall clock
        self.jobs = JobController(self.loop, self.clock)
        self.cronjobs = CronJobController(self.loop, self.clock)
        self.disruption = DisruptionController(self.loop, clock=self.store.clock)
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
        self.loop.add_handler(self.disruption)
        self.loop.add_handler(self.runtime)
        self.loop.add_handler(self.pod_network)
        self.loop.subscribe()
        try:
            if self.serve and self.kubelets:
                self.pod_network.start()  # before any pod gets an IP
            if self.kubelets:
                for node in scenario_mod.expand_nodes(self.scenario):
                    self._register_node(node)
                node_side.create_objects(self.store, self.scenario.objects, self.scenario_name)
            self.loop.start()
            if self.kubelets:
                self._apply_node_faults(self.scenario)
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
                host="127.0.0.1",
                port=self._server.port,
                ca_pem=self.ca_pem or b"",
                issue_token=self._issue_token,
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
        return {**self.node_faults(), "api": self.api_faults.to_spec()}

    def set_api_faults(self, **kwargs: Any) -> None:
        """Change the API faults (error_rate, codes, latency_ms, drop_rate, lost_response_rate,
        retry_after_seconds, seed)."""
        self.api_faults.update(**kwargs)

    def clear_api_faults(self) -> None:
        self.api_faults.update(
            error_rate=0.0, codes=(500,), latency_ms=0, drop_rate=0.0, lost_response_rate=0.0
        )

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

    def _register_node(self, node: scenario_mod.ConcreteNode) -> str:
        return str(node_side.register_node(self.store, self.runtime, node)["metadata"]["name"])

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
