"""The nodes' side of a scenario, wherever its API server runs: the kubelet runtime built from the scenario,
node registration (Node, NodeGpuState, NodeFeature), the scenario's objects, and the fault controls of the
nodes (images, GPUs, host driver, readiness).

Shared by ``gpuplan.sim.cluster.Simulator`` (everything in one process, on the in-process ``Store``) and
``gpuplan.sim.agent.NodeAgent`` (the same kubelets as clients of a Kubernetes API server, through
``RemoteStore``): both hand their store and loop to these functions, so the two run one implementation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.sim import nfd, scenario_objects
from gpuplan.sim import nodes as node_objects
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.controllers.nodes import NodeLifecycle
from gpuplan.sim.kubelet import ports
from gpuplan.sim.kubelet import runtime as runtime_mod
from gpuplan.sim.kubelet.state import NodeGpuState

OBJECTS_MANAGER = "kubectl-create"
NODE_MANAGER = "kubelet"
IMAGE_FAILURES = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "RunContainerError"})


class SimulatorError(GpuplanError):
    """The simulator cannot start as asked: a bad scenario object, a port in use, ..."""


def scenario_of(value: scenario_mod.Scenario | str | dict[str, Any]) -> tuple[scenario_mod.Scenario, str]:
    """The scenario and its name from a Scenario, a dict, a built-in name or a file."""
    if isinstance(value, scenario_mod.Scenario):
        return value, "custom"
    if isinstance(value, dict):
        try:
            return scenario_mod.Scenario.model_validate(value), "custom"
        except ValueError as exc:
            raise SimulatorError("invalid scenario", detail=str(exc)) from None
    return scenario_mod.load_scenario(value), Path(value).stem if value.endswith((".yaml", ".yml")) else value


def kubelet_runtime(loop: Loop, scenario: scenario_mod.Scenario) -> runtime_mod.KubeletRuntime:
    """The kubelets with the scenario's timing, image faults and declared ports."""
    timing = scenario.timing
    runtime = runtime_mod.KubeletRuntime(
        loop,
        timing=runtime_mod.Timing(
            timing.podReadySeconds,
            timing.imagePullSeconds,
            timing.crashLoopBackoffSeconds,
            mig_reconfigure_seconds=timing.migReconfigureSeconds,
        ),
        faults=runtime_mod.Faults(dict(scenario.faults.images), dict(scenario.faults.slowImages)),
    )
    runtime.declared_ports = tuple(
        ports.DeclaredPort(p.image, p.port, p.path, p.status, p.contentType, p.body) for p in scenario.ports
    )
    return runtime


def register_node(
    store: ObjectStore,
    runtime: runtime_mod.KubeletRuntime,
    node: scenario_mod.ConcreteNode,
    *,
    exists_ok: bool = False,
) -> dict[str, Any]:
    """Run a kubelet for ``node``, then register its Node as ``kubelet`` and, where NFD runs, its
    NodeFeature; the stored Node. ``exists_ok``: a Node or NodeFeature already there is kept (an agent
    started again on the same cluster)."""
    runtime.add_state(NodeGpuState(node))
    nodes = resource_type(store.registry, "v1", "Node")
    try:
        stored = store.create(
            nodes, node_objects.node_object(node, now=datetime.now(UTC)), manager=NODE_MANAGER
        )
    except store_mod.ApiError as exc:
        if not (exists_ok and exc.code == 409):
            raise
        stored = store.get(nodes, None, node.name)
    if node.nfd:
        try:
            nfd.publish(store, node)
        except store_mod.ApiError as exc:
            if not (exists_ok and exc.code == 409):
                raise
    return stored


def create_objects(
    store: ObjectStore, objects: list[dict[str, Any]], scenario_name: str, *, exists_ok: bool = False
) -> None:
    """The scenario's objects as ``kubectl create`` makes them: CRDs and Namespaces first, then file order.
    ``exists_ok``: an object already there counts as created (its uid is read for its dependents)."""
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
        _create_object(store, scenario_name, index, obj, created, exists_ok)


def _create_object(
    store: ObjectStore,
    scenario_name: str,
    index: int,
    obj: dict[str, Any],
    created: scenario_objects.Created,
    exists_ok: bool,
) -> None:
    meta = obj.get("metadata") or {}
    what = (
        f"objects[{index}] ({obj.get('kind')} "
        f"{meta.get('namespace', '') + '/' if meta.get('namespace') else ''}"
        f"{meta.get('name')})"
    )
    rt = store.registry.for_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    if rt is None:
        raise SimulatorError(
            f"the simulator serves no {obj.get('apiVersion')} {obj.get('kind')}",
            where=f"scenario {scenario_name} {what}",
            hint="define its CustomResourceDefinition in the same scenario's objects",
        )
    namespace = (meta.get("namespace") or "default") if rt.namespaced else None
    try:
        scenario_objects.create(store, rt, obj, namespace, created, manager=OBJECTS_MANAGER)
    except KeyError as exc:
        raise SimulatorError(
            str(exc.args[0]), where=f"scenario {scenario_name} {what}", hint="list the owner first"
        ) from None
    except store_mod.ApiError as exc:
        if exists_ok and exc.code == 409 and meta.get("name"):
            found = store.get(rt, namespace, str(meta["name"]))
            key = (str(obj.get("kind")), namespace or "", str(meta["name"]))
            created[key] = str(found["metadata"]["uid"])
            return
        raise SimulatorError(
            f"could not be created: {exc.message}",
            where=f"scenario {scenario_name} {what}",
            hint="add the Namespace it needs, or fix the manifest",
        ) from None


class NodeControls:
    """The fault controls of simulated nodes, run on the loop thread (``run_sync``). Subclasses set ``loop``,
    ``runtime`` and ``lifecycle``."""

    loop: Loop
    runtime: runtime_mod.KubeletRuntime
    lifecycle: NodeLifecycle

    def node_faults(self) -> dict[str, Any]:
        """The nodes' faults now, as the control API's ``/sim/v1/faults`` shows them (all but ``api``)."""

        def collect() -> dict[str, Any]:
            gpus = [
                {"node": node, "gpu": index, **fault.model_dump(exclude={"node", "gpu"}, exclude_none=True)}
                for node, state in sorted(self.runtime.states.items())
                for index, fault in sorted(state.gpu_faults.items())
            ]
            return {
                "images": dict(self.runtime.faults.images),
                "slowImages": dict(self.runtime.faults.slow_images),
                "gpus": gpus,
                "nodes": [{"node": n, "notReady": True} for n in sorted(self.runtime.down)],
            }

        return self.loop.run_sync(collect)

    def set_image_fault(self, image: str, kind: str | None) -> None:
        """Pods running ``image`` fail with ``kind`` (CrashLoopBackOff, ImagePullBackOff, ErrImagePull,
        RunContainerError) from now on; ``None`` heals them."""
        if kind is not None and kind not in IMAGE_FAILURES:
            raise ValueError(f"unknown image fault {kind!r}; valid: {', '.join(sorted(IMAGE_FAILURES))}")

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

    def _state(self, node: str) -> NodeGpuState:
        state = self.runtime.states.get(node)
        if state is None:
            raise store_mod.ApiError(404, "NotFound", f'nodes "{node}" not found')
        return state

    def _apply_node_faults(self, scenario: scenario_mod.Scenario) -> None:
        """The scenario's ``faults.nodes`` and ``faults.gpus`` (its image faults are the runtime's from the
        start)."""
        for fault in scenario.faults.nodes:
            self.set_node_ready(fault.node, not fault.notReady)
        for gpu_fault in scenario.faults.gpus:
            state = self._state(gpu_fault.node)
            indexes = range(len(state.gpus)) if gpu_fault.gpu is None else [gpu_fault.gpu]
            values = gpu_fault.model_dump(exclude={"node", "gpu"}, exclude_none=True)
            for index in indexes:
                self.set_gpu_fault(gpu_fault.node, index, **values)
