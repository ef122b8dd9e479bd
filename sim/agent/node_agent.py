"""The simulated GPU nodes of a scenario as a client of any Kubernetes API server, the way kwok's simulated
nodes are (sigs.k8s.io/kwok ``pkg/kwok/controllers``: nodes and their pods kept alive by a process that only
talks to the API server).

``NodeAgent(scenario, url, token, ca_pem)`` does on ``start()`` what the kubelets, NFD and the scenario's
author do on a real cluster, through the REST API only (``RemoteStore``):

- registers each scenario node (its Node as ``sim/nodes.py`` builds it; its NodeFeature, with NFD's CRD and
  namespace where none is served yet, as ``sim/nfd.py`` makes them), then creates the scenario's objects
  (``node_side.create_objects``, as the in-process ``Simulator`` does);
- runs one ``Loop`` over the remote store with only the nodes' handlers: ``PodEvents`` (the kubelet's Events
  of its own nodes' pods, never the scheduler's ``Scheduled``), the kubelet runtime (pod statuses, restarts,
  crash loops, image pulls, the NVIDIA effects on nodes: driver, toolkit runtime handler, device-plugin
  capacity, GFD labels, DCGM metrics, MIG, MPS) and the pod network (pod IPs from ``pod_ips``: the
  agent's own loopback /16 by default, so a pod's exporter answers on its IP; or a CIDR such as the real
  cluster's ``198.18.0.0/15``, which nothing here listens on);
- renews each node's Lease (``leases.NodeLeases``: every 10 s, spread over the interval) and reports
  each node's conditions with a new heartbeat every ``status_report_seconds`` (the kubelet's
  ``nodeStatusReportFrequency``, 5 min), each node on its own loop timer, so neither bursts.

The loop reflects two kinds: nodes (all of them: a node agent's are found among a cluster's few thousand)
and pods bound to a node (``fieldSelector=spec.nodeName!=``), filtered to this agent's nodes on arrival.
A real kubelet watches ``spec.nodeName=<its node>``; from one process that is one watch per node, 1,000
connections and 1,000 re-lists after an apiserver restart at fleet-1000, where one watch of the bound pods
costs one connection whatever the fleet (unbound pods never concern a kubelet: the scheduler's work). The
ConfigMaps the kubelets read (device-plugin and MIG configs) come from a third reflector, started at the
first read (``RemoteStore`` ``cache_reads``). In steady state the agent sends nothing per node but the
Leases and the 5-minute status reports.

What it does not do, left to the control plane it joins: the DaemonSet, Job, CronJob, endpoints and
namespace controllers, scheduling (the real kube-scheduler binds and records ``Scheduled``), and the node
lifecycle controller (``set_node_ready(name, False)`` writes what that controller would at once, and stops
the node's Lease and status reports, so a real one agrees). Pod logs, exec and port-forward are served by
no kubelet endpoint here: the in-process ``Simulator`` serves them from its own kubelets only.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

from gpuplan.sim import node_side
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.agent.client import ApiClient, path_of
from gpuplan.sim.agent.leases import DURATION_SECONDS, NodeLeases
from gpuplan.sim.agent.remote_store import RemoteStore, WatchOptions
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.controllers.cache import Obj, resource_type
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.nodes import NodeLifecycle
from gpuplan.sim.kubelet.pod_ips import PodIps
from gpuplan.sim.kubelet.pod_network import PodNetwork

log = logging.getLogger(__name__)

BOUND_PODS = "spec.nodeName!="
STATUS_REPORT_SECONDS = 300.0  # the kubelet's nodeStatusReportFrequency (pkg/kubelet/apis/config/v1beta1)
TOKEN_SECONDS = 3607  # what the kubelet asks for a projected service-account token


class NodeAgent(node_side.NodeControls):
    """A scenario's nodes, run against the API server at ``url`` (see the module doc)."""

    def __init__(
        self,
        scenario: scenario_mod.Scenario | str | dict[str, Any],
        url: str,
        token: str,
        ca_pem: bytes | None,
        *,
        pod_ips: PodIps | str | None = None,
        serve_pod_ips: bool = False,
        lease_renew_seconds: float | None = None,
        lease_duration_seconds: int = DURATION_SECONDS,
        status_report_seconds: float = STATUS_REPORT_SECONDS,
        create_objects: bool = True,
        watch_timeout_s: int | None = None,
    ) -> None:
        """``pod_ips``: a CIDR or an allocator for pod IPs (None: a loopback /16 of the agent's own, served);
        ``serve_pod_ips``: listen on the pods' IPs from ``pod_ips`` too (where this process's network routes
        them to its loopback, as the real control plane's private namespace does);
        ``lease_renew_seconds``: each Lease's renew interval (a quarter of its duration by default);
        ``lease_duration_seconds``: the Leases' ``leaseDurationSeconds`` (the kubelet's 40 s by default);
        ``status_report_seconds``: how often each node's conditions get a new heartbeat;
        ``create_objects``: create the scenario's objects (False: someone else applies them);
        ``watch_timeout_s``: each watch request's ``timeoutSeconds`` (5 min by default)."""
        self.scenario, self.scenario_name = node_side.scenario_of(scenario)
        self.url = url
        self.token = token
        self.ca_pem = ca_pem
        self.create_objects = create_objects
        self.status_report_seconds = status_report_seconds
        self.client = ApiClient(url, token, ca_pem)
        self.store = RemoteStore(
            self.client,
            watch_options={("", "pods"): WatchOptions(BOUND_PODS, keep=self._ours)},
            cache_reads=[("", "configmaps")],
            watch_timeout_s=watch_timeout_s,
        )
        self.loop = Loop(self.store, scheduler_events=False, kubelet_events=self._runs)
        self.runtime = node_side.kubelet_runtime(self.loop, self.scenario)
        ips = PodIps.from_cidr(pod_ips) if isinstance(pod_ips, str) else pod_ips
        self.pod_network = PodNetwork(self.runtime, ips, listen=serve_pod_ips)
        self.lifecycle = NodeLifecycle(self.loop, self.runtime)
        self.leases = NodeLeases(
            self.store, duration_seconds=lease_duration_seconds, renew_seconds=lease_renew_seconds
        )
        self._started = False

    @property
    def nodes(self) -> list[str]:
        return sorted(self.runtime.states)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised inside the kubelet handlers (logged; tests assert there are none)."""
        return list(self.loop.errors)

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> NodeAgent:
        """Register the nodes and the scenario's objects, start the loop, the Leases and the status reports;
        returns once the node and pod reflectors have listed (``timeout``)."""
        self._started = True
        try:
            self.store.discover()
            # before the loop hands the kubelets a pod: a process started without it would find no API
            host, port = self._api_endpoint()
            self.runtime.processes.serve(
                host=host, port=port, ca_pem=self.ca_pem or b"", issue_token=self._issue_token
            )
            self.loop.add_handler(self.runtime)
            self.loop.add_handler(self.pod_network)
            self.pod_network.start()  # before any pod gets an IP
            nodes = scenario_mod.expand_nodes(self.scenario)
            for node in nodes:
                stored = node_side.register_node(self.store, self.runtime, node, exists_ok=True)
                self.leases.add(node.name, str(stored["metadata"].get("uid", "")))
            if self.create_objects:
                node_side.create_objects(
                    self.store, self.scenario.objects, self.scenario_name, exists_ok=True
                )
            # after the nodes' kubelets exist: the pod list keeps only their pods (an agent started again
            # finds its nodes' pods there); the lists hold whatever was written before
            self.loop.subscribe(kinds=("nodes", "pods"))
            self.loop.start()
            self._apply_node_faults(self.scenario)
            self.leases.start()
            for index, node in enumerate(nodes):
                offset = self.status_report_seconds * (index + 1) / len(nodes)
                self._report_status_later(node.name, offset)
            if not self.store.wait_synced(timeout):
                raise ApiError(504, "Timeout", f"the node agent's watches did not list within {timeout} s")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every thread and pod process the agent started (the objects it created stay)."""
        if not self._started:
            return
        self._started = False
        self.leases.stop()
        self.runtime.processes.close()
        self.pod_network.stop()
        self.loop.stop()
        self.store.close()

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- waiting -------------------------------------------------------------------------------------
    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until the loop has handled everything, no pod is on its way to its first outcome, and every
        watch delivered the agent's own latest write of its kind. False if ``timeout`` passed first."""
        return self.loop.wait_idle(timeout, horizon=float("inf"))

    # -- fault controls (node_side.NodeControls) ------------------------------------------------------
    def set_node_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> None:
        """Node ``name``'s kubelet stops (its Lease and status reports stop too, so a real node lifecycle
        controller marks it as this writes it) or comes back."""
        (self.leases.resume if ready else self.leases.pause)(name)
        super().set_node_ready(name, ready, unreachable=unreachable)

    # -- internals -----------------------------------------------------------------------------------
    def _ours(self, pod: Obj) -> bool:
        """A pod bound to one of this agent's nodes (the pod reflector's thread reads the node set)."""
        return (pod.get("spec") or {}).get("nodeName") in self.runtime.states

    def _runs(self, node: str) -> bool:
        return node in self.runtime.states

    def _report_status_later(self, node: str, delay: float) -> None:
        def report() -> None:
            try:
                self.lifecycle.heartbeat(node)
            except ApiError as exc:
                log.warning("status report of node %s: %s", node, exc.message)
            if node in self.runtime.states:
                self._report_status_later(node, self.status_report_seconds)

        self.loop.call_later(delay, report, settling=False)

    def _api_endpoint(self) -> tuple[str, int]:
        """Where a pod's process reaches the API server. A kubelet gives it the ``kubernetes`` Service's
        ClusterIP and port (``pkg/kubelet/envvars/envvars.go`` FromServices), which kube-proxy routes to the
        Service's endpoint; no kube-proxy runs here, so the process is given that endpoint itself: the
        address the API server advertises, which it keeps in the Service's EndpointSlice
        (``pkg/controlplane/reconcilers/endpointsadapter.go``). A server that keeps none (the built-in
        one) is reached where the agent reaches it."""
        slices = self.store.registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
        found: Obj = {}
        if slices is not None:
            try:
                found = self.client.request("GET", path_of(slices, "default", "kubernetes"))
            except ApiError:
                pass  # none kept (404), or not readable: the agent's own address serves as well
        ports = [p for p in found.get("ports") or [] if p.get("name") == "https" and p.get("port")]
        for endpoint in found.get("endpoints") or []:
            if ports and endpoint.get("addresses"):
                return str(endpoint["addresses"][0]), int(ports[0]["port"])
        split = urllib.parse.urlsplit(self.url)
        return split.hostname or "127.0.0.1", split.port or 443

    def _issue_token(self, namespace: str, service_account: str, pod: Obj) -> str:
        """A token for a pod's process, bound to the pod, as the kubelet asks for one (TokenRequest)."""
        accounts = resource_type(self.store.registry, "v1", "ServiceAccount")
        meta = pod.get("metadata") or {}
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": TOKEN_SECONDS,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                },
            },
        }
        answer = self.client.request(
            "POST", path_of(accounts, namespace, service_account, "token"), body=body
        )
        return str((answer.get("status") or {}).get("token") or "")
