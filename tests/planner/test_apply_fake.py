"""The apply walker on the in-memory fake, no simulator: objects created in dependency order and recorded in
the state file, and a failed health gate rolled back to exactly the objects and records there were before.

The fake's DaemonSet controller (providers/fake_daemonsets.py) places pods with the planner's own predicate
and makes them Ready, unless their image is one the test calls broken; the nodes already show the device
plugin's effect (allocatable nvidia.com/gpu) and the toolkit's runtime handler, so the node gates pass once
the pods are Ready. Rolling-update and crash-loop behaviour over time is the simulator's (test_apply.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.planner import placement
from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions, ApplyResult
from gpuplan.planner.apply.walker import apply, resume_interrupted
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.fake_daemonsets import DaemonSetController
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

NS = "gpu-operator"
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
BROKEN = "v0.19.0"
"""A device plugin version whose image the fake's kubelet cannot pull."""
BOOKKEEPING = ("resourceVersion", "generation", "managedFields")


def spec(plugin: str = "v0.20.1", gfd: str = "{owner: none}") -> Spec:
    text = lab_spec(
        devicePlugin=f"{{version: {plugin}}}",
        gfd=gfd,
        dcgmExporter="{owner: none}",
        validator="{owner: none}",
    )
    return parse_spec(text, filename="gpustack.yaml")


def unpullable(pod_spec: Mapping[str, Any]) -> str | None:
    images = [str(c.get("image")) for c in pod_spec.get("containers") or ()]
    return "ImagePullBackOff" if any(image.endswith(f":{BROKEN}") for image in images) else None


@dataclass
class Recorded:
    events: list[ApplyEvent] = field(default_factory=list)

    def on_event(self, event: ApplyEvent) -> None:
        self.events.append(event)


@dataclass
class Lab:
    cluster: FakeKubernetes
    backend: LocalFileBackend

    def plan(self, desired: Spec) -> Plan:
        return make_plan(
            desired, self.backend.read(), refresh.refresh(self.cluster, desired, self.backend.read())
        )

    def apply(
        self, desired: Spec, hooks: Recorded | None = None, **options: Any
    ) -> tuple[ApplyResult, Recorded]:
        hooks = hooks or Recorded()
        with self.backend.locked("apply"):
            result = apply(
                self.plan(desired),
                spec=desired,
                backend=self.backend,
                writer=self.cluster,
                hooks=hooks,
                options=ApplyOptions(poll_seconds=0.01, **options),
            )
        return result, hooks

    def state(self) -> StateFile:
        state = self.backend.read()
        assert state is not None
        return state

    def objects(self) -> dict[ObjectKey, dict[str, Any]]:
        """Every object but the pods, without what the server moves on each write (versions, status)."""
        found = {}
        for key, obj in self.cluster.dump().items():
            if key.kind == "Pod":
                continue
            metadata = {k: v for k, v in obj["metadata"].items() if k not in BOOKKEEPING}
            found[key] = {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}
        return found

    def plugin_pods(self) -> list[tuple[str, str, bool]]:
        """(node, image, Ready) of each device plugin pod."""
        pods = self.cluster.list_pods(namespace=NS, label_selector="app=nvidia-device-plugin-daemonset")
        return [
            (
                p.manifest["spec"]["nodeName"],
                p.manifest["spec"]["containers"][0]["image"].rsplit(":", 1)[1],
                p.manifest["status"]["conditions"] == [{"type": "Ready", "status": "True"}],
            )
            for p in pods
        ]


@pytest.fixture
def lab(tmp_path: Path, gpu_node: Callable[..., dict[str, Any]]) -> Iterator[Lab]:
    nodes = [gpu_node("gpu-0", allocatable="1", driver="580.105.08"), gpu_node("cpu-0", gpu=None)]
    controller = DaemonSetController(runs_on=placement.runs_on, failing=unpullable)
    backend = LocalFileBackend(tmp_path / "lab.gpuplan.state")
    yield Lab(FakeKubernetes(nodes=nodes, controller=controller), backend)
    backend.close()


def test_an_apply_creates_the_objects_in_dependency_order_and_records_each_in_the_state(lab: Lab) -> None:
    result, hooks = lab.apply(spec())

    assert result.ok, result.message
    created = [key.ref for method, key in lab.cluster.calls if method == "create"]
    assert created == [
        "v1/Namespace/gpu-operator",
        "node.k8s.io/v1/RuntimeClass/nvidia",  # the toolkit's, which the device plugin depends on
        "v1/ServiceAccount/gpu-operator/nvidia-device-plugin",
        "rbac.authorization.k8s.io/v1/Role/gpu-operator/nvidia-device-plugin",
        "rbac.authorization.k8s.io/v1/ClusterRole/nvidia-device-plugin",
        "rbac.authorization.k8s.io/v1/RoleBinding/gpu-operator/nvidia-device-plugin",
        "rbac.authorization.k8s.io/v1/ClusterRoleBinding/nvidia-device-plugin",
        "apps/v1/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
    ]
    # the device plugin's changes start once the toolkit's are made; its gate once the toolkit's passed
    steps = [(e.type, e.component, e.state) for e in hooks.events]
    toolkit_made = steps.index(("change_complete", "toolkit", None))
    assert toolkit_made < steps.index(("change_start", "devicePlugin", None))
    plugin_gate = next(i for i, s in enumerate(steps) if s[:2] == ("progress", "devicePlugin"))
    assert steps.index(("progress", "toolkit", "passed")) < plugin_gate
    state = lab.state()
    assert sorted(state.resources) == sorted(result.changed) and len(result.changed) == 7
    assert not state.journal
    for address, record in state.resources.items():
        live = lab.cluster.read(ObjectKey.of(record.owned))
        assert live is not None, address
        assert (record.uid, record.resource_version) == (live.uid, live.resource_version), address
    assert lab.plugin_pods() == [("gpu-0", "v0.20.1", True)]  # on the GPU node only
    assert not lab.plan(spec()).has_changes


def test_a_failed_gate_rolls_an_update_back_to_the_objects_and_records_there_were(lab: Lab) -> None:
    first, _ = lab.apply(spec())
    assert first.ok, first.message
    objects, before = lab.objects(), lab.state()

    result, hooks = lab.apply(spec(BROKEN))

    assert not result.ok and result.rolled_back == [PLUGIN]
    [failure] = result.failed
    assert (failure.address, failure.reason, failure.gate, failure.node) == (
        PLUGIN,
        "ImagePullBackOff",
        "rollout",
        "gpu-0",
    )
    assert [e.type for e in hooks.events if e.type.startswith("rollback")] == [
        "rollback_start",
        "rollback_complete",
    ]
    assert lab.objects() == objects
    after = lab.state()
    assert not after.journal and after.serial > before.serial
    assert {a: (r.uid, r.owned) for a, r in after.resources.items()} == {
        a: (r.uid, r.owned) for a, r in before.resources.items()
    }
    assert lab.plugin_pods() == [("gpu-0", "v0.20.1", True)]
    assert not lab.plan(spec()).has_changes


def test_a_failed_gate_of_a_first_apply_removes_every_object_it_created(lab: Lab) -> None:
    untouched = lab.objects()

    result, _ = lab.apply(spec(BROKEN))

    assert not result.ok and result.failed[0].reason == "ImagePullBackOff"
    assert set(result.rolled_back) == set(result.changed) and len(result.changed) == 7
    namespace = ObjectKey("v1", "Namespace", None, NS)
    assert set(lab.objects()) == {*untouched, namespace}  # gpuplan never deletes a namespace
    assert lab.plugin_pods() == []
    state = lab.state()
    assert state.resources == {} and not state.journal


GFD = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
CHAIN = "{version: v0.20.1}"
"""GFD owned too: the chain toolkit -> device plugin -> GFD."""


@dataclass
class HandlerOnceGfdIsMade(Recorded):
    """Hooks that give the node the toolkit's runtime handler (the toolkit's effect, which its gate waits
    for) only once GFD's DaemonSet was created: the toolkit's gate can pass only if the walker made its
    dependents' changes before it waited for that gate."""

    cluster: FakeKubernetes | None = None
    node: dict[str, Any] = field(default_factory=dict)

    def on_event(self, event: ApplyEvent) -> None:
        super().on_event(event)
        if event.type == "change_complete" and event.address == GFD and self.cluster is not None:
            self.cluster.put_node(self.node)


def without_handler(node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "status": {**node["status"], "runtimeHandlers": [{"name": "runc", "features": {}}]}}


def test_dependents_roll_out_before_the_dependency_gate_passes_and_are_gated_after_it(lab: Lab) -> None:
    [gpu] = [n.manifest for n in lab.cluster.list_nodes().items if n.key.name == "gpu-0"]
    lab.cluster.put_node(without_handler(gpu))
    hooks = HandlerOnceGfdIsMade(cluster=lab.cluster, node=gpu)

    result, _ = lab.apply(spec(gfd=CHAIN), hooks, health_timeout={"toolkit": 30})

    assert result.ok, result.message
    events = [(e.type, e.component, e.state) for e in hooks.events]
    toolkit_passed = events.index(("progress", "toolkit", "passed"))
    made = [i for i, e in enumerate(events) if e[0] == "change_complete"]
    assert len(made) == 13 and max(made) < toolkit_passed  # every DaemonSet out before the first gate passed

    def first_gate(component: str) -> int:
        return next(i for i, e in enumerate(events) if e[:2] == ("progress", component))

    assert toolkit_passed < first_gate("devicePlugin")
    assert events.index(("progress", "devicePlugin", "passed")) < first_gate("gfd")


def test_a_dependency_gate_failure_undoes_the_dependents_changes_already_made(lab: Lab) -> None:
    [gpu] = [n.manifest for n in lab.cluster.list_nodes().items if n.key.name == "gpu-0"]
    lab.cluster.put_node(without_handler(gpu))  # the toolkit's effect never appears
    untouched = lab.objects()

    result, hooks = lab.apply(spec(gfd=CHAIN), health_timeout={"toolkit": 0.5})

    assert not result.ok
    [cause] = result.causes
    assert (cause.component, cause.gate) == ("toolkit", "runtime-handler")
    assert len(result.changed) == 13 and GFD in result.changed and PLUGIN in result.changed
    assert result.rolled_back == result.changed[::-1]  # every change, the last made first
    assert "Rolled back: 13 change(s) undone" in result.message
    forward = hooks.events[: hooks.events.index(next(e for e in hooks.events if e.type == "rollback_start"))]
    assert not [e for e in forward if e.type == "progress" and e.component != "toolkit"]  # never judged
    namespace = ObjectKey("v1", "Namespace", None, NS)
    assert set(lab.objects()) == {*untouched, namespace}
    assert lab.plugin_pods() == []
    state = lab.state()
    assert state.resources == {} and not state.journal


def test_no_rollback_taints_the_changed_dependents_whose_gates_were_never_judged(lab: Lab) -> None:
    [gpu] = [n.manifest for n in lab.cluster.list_nodes().items if n.key.name == "gpu-0"]
    lab.cluster.put_node(without_handler(gpu))

    result, _ = lab.apply(spec(gfd=CHAIN), health_timeout={"toolkit": 0.5}, rollback=False)

    assert not result.ok and result.kept == 13
    assert {PLUGIN, GFD, "toolkit/RuntimeClass/nvidia"} <= set(result.tainted)
    state = lab.state()
    assert {a for a, r in state.resources.items() if r.status == "tainted"} == set(result.tainted)


class Killed(BaseException):
    """Stands for a kill -9: nothing of the walker's handles it, so it leaves the journal as it was."""


@dataclass
class KilledAtTheFirstGate(Recorded):
    def on_event(self, event: ApplyEvent) -> None:
        super().on_event(event)
        if event.type == "progress":
            raise Killed


def test_resume_gates_each_component_whose_changes_were_made_before_a_kill_in_graph_order(lab: Lab) -> None:
    with pytest.raises(Killed):
        lab.apply(spec(gfd=CHAIN), KilledAtTheFirstGate())
    journal = lab.state().journal
    assert len(journal) == 13 and {e.state for e in journal} == {"done"}  # the dependents' changes too

    hooks = Recorded()
    with lab.backend.locked("apply"):
        result = resume_interrupted(
            spec=spec(gfd=CHAIN),
            backend=lab.backend,
            writer=lab.cluster,
            hooks=hooks,
            options=ApplyOptions(poll_seconds=0.01),
        )

    assert result is not None and result.ok and result.kept == 13, result and result.message
    passed = [e.component for e in hooks.events if e.type == "progress" and e.state == "passed"]
    assert passed[:3] == ["toolkit", "devicePlugin", "gfd"]
    assert not lab.state().journal and lab.plugin_pods() == [("gpu-0", "v0.20.1", True)]
    assert not lab.plan(spec(gfd=CHAIN)).has_changes
