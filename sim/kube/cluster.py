"""A simulated GPU cluster on the real control plane: what ``gpuplan sim start --control-plane kube`` runs.

:meth:`KubeCluster.start` makes the API server's listening socket on the caller's loopback, moves this
process into a private network namespace (``netns``: irreversible, so only a process of its own runs a
KubeCluster), starts etcd and the three Kubernetes programs there (``controlplane``), joins the listening
socket to the API server (``relay``), and starts the scenario's GPU nodes as a client of the API server
(``gpuplan.sim.agent.NodeAgent``). The kubeconfig it writes names the relayed port and the cluster's admin.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.agent import NodeAgent
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.control import Control, ControlError
from gpuplan.sim.kube import binaries, netns, relay
from gpuplan.sim.kube.control_server import ControlServer
from gpuplan.sim.kube.controlplane import API_PORT, ControlPlane
from gpuplan.sim.kube.sizing import Sizing


class KubeCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler, and the scenario's GPU nodes."""

    def __init__(
        self,
        scenario: scenario_mod.Scenario | str,
        *,
        kube_bin: str | Path | None = None,
        port: int = 0,
        control_port: int | None = 0,
        run_nodes: bool = True,
    ) -> None:
        """``port``: the API server's port on the caller's loopback (0: a free one); ``control_port``: the
        ``/sim/v1/`` control API's (None: none); ``run_nodes`` False: the control plane alone."""
        self.scenario = (
            scenario if isinstance(scenario, scenario_mod.Scenario) else scenario_mod.load_scenario(scenario)
        )
        self.scenario_name = scenario if isinstance(scenario, str) else "custom"
        self.binaries = binaries.find(kube_bin)
        self.port = port
        self.control_port = control_port
        self.run_nodes = run_nodes
        self.nodes: NodeAgent | None = None
        self._control: ControlServer | None = None
        self.control_plane: ControlPlane | None = None
        self._relay: relay.Relay | None = None
        self._started_at: float | None = None

    def start(self) -> KubeCluster:
        # Both listening sockets are made in the caller's network namespace, before this process leaves it.
        listener = relay.listen("127.0.0.1", self.port)
        control = None if self.control_port is None else relay.listen("127.0.0.1", self.control_port)
        try:
            netns.enter()
            sizing = Sizing(nodes=len(scenario_mod.expand_nodes(self.scenario)))
            self.control_plane = ControlPlane(self.binaries, sizing=sizing).start()
            self._relay = relay.Relay(listener, ("127.0.0.1", API_PORT)).start()
            if self.run_nodes:
                self.nodes = NodeAgent(
                    self.scenario,
                    self.control_plane.url,
                    self.control_plane.credentials.nodes,
                    self.control_plane.ca_pem,
                    pod_ips=netns.POD_CIDR,
                    serve_pod_ips=True,
                    lease_duration_seconds=sizing.lease_duration_seconds,
                ).start()
            if control is not None:
                token = self.control_plane.credentials.admin
                self._control = ControlServer(control, token, Control(self).handle).start()
        except BaseException:
            listener.close()
            if control is not None:
                control.close()
            self.stop()
            raise
        self._started_at = time.monotonic()
        return self

    def stop(self) -> None:
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self.nodes is not None:
            self.nodes.stop()
            self.nodes = None
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        if self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The API server as the caller reaches it: the relayed port on its loopback."""
        if self._relay is None:
            raise RuntimeError("the cluster is not running")
        return f"https://127.0.0.1:{self._relay.port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig for the cluster's admin (mode 0600)."""
        if self.control_plane is None:
            raise RuntimeError("the cluster is not running")
        return write_kubeconfig(
            path, self.url, self.control_plane.credentials.admin, self.control_plane.ca_pem
        )

    @property
    def control_url(self) -> str | None:
        """Where the ``/sim/v1/`` control API answers (the admin's token), if it runs."""
        return None if self._control is None else self._control.url

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """The simulated nodes have nothing left to do. The real controllers' work is not seen here: a pod
        the DaemonSet controller has yet to create again, or the scheduler to bind, leaves the nodes idle;
        await such a state on the object itself (a watch, ``kubectl wait``)."""
        return True if self.nodes is None else self.nodes.wait_idle(timeout)

    # -- the control API (gpuplan.sim.control.Controllable) ------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario_name,
            "controlPlane": "kube",
            "url": self.url,
            "nodes": len(self._agent().nodes) if self.nodes is not None else 0,
            "uptimeSeconds": 0.0 if self._started_at is None else time.monotonic() - self._started_at,
        }

    def faults(self) -> dict[str, Any]:
        return {**self._agent().node_faults(), "api": {}}

    def set_image_fault(self, image: str, kind: str | None) -> None:
        self._agent().set_image_fault(image, kind)

    def set_slow_image(self, image: str, seconds: float | None) -> None:
        self._agent().set_slow_image(image, seconds)

    def set_gpu_fault(self, node: str, gpu: int, **kwargs: Any) -> None:
        self._agent().set_gpu_fault(node, gpu, **kwargs)

    def clear_gpu_faults(self, node: str | None = None) -> None:
        self._agent().clear_gpu_faults(node)

    def set_host_driver(self, node: str, version: str) -> None:
        self._agent().set_host_driver(node, version)

    def set_node_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> None:
        self._agent().set_node_ready(name, ready, unreachable=unreachable)

    def set_api_faults(self, **kwargs: Any) -> None:
        raise ControlError(_NOT_HERE.format(what="API faults", why="the real kube-apiserver answers itself"))

    def clear_api_faults(self) -> None:
        self.set_api_faults()

    def add_node(self, spec: dict[str, Any]) -> list[str]:
        raise ControlError(
            _NOT_HERE.format(what="adding nodes", why="the node agent's nodes are fixed at start")
        )

    def remove_node(self, name: str) -> None:
        raise ControlError(
            _NOT_HERE.format(what="removing nodes", why="the node agent's nodes are fixed at start")
        )

    def run_cronjob(self, namespace: str, name: str, job: str | None = None) -> dict[str, Any]:
        raise ControlError(
            _NOT_HERE.format(what="running a CronJob now", why="use kubectl create job --from=cronjob/NAME")
        )

    def batch_clock(self) -> dict[str, Any]:
        raise ControlError(
            _NOT_HERE.format(what="the batch clock", why="the real CronJob controller keeps the wall clock")
        )

    def advance_batch_clock(self, seconds: float) -> dict[str, Any]:
        return self.batch_clock()

    def _agent(self) -> NodeAgent:
        if self.nodes is None:
            raise ControlError("this cluster runs no simulated nodes")
        return self.nodes


_NOT_HERE = "{what} do not apply to the real control plane (--control-plane kube): {why}"
