"""A gpuplan-owned driver on the four-node ``upgrade4`` scenario: installed at one version by the apply
engine, then changed to another through the node-by-node rollout (planner.driver.step). The store's
event stream is the witness: how many nodes were cordoned at any moment, which were cordoned and uncordoned,
which pods were evicted, and what each node reports at the end. A driver image that crash-loops stops the
rollout at its first node, which gets the old driver back; `gpuplan rollback` rolls the old driver back node
by node too."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from apply_process import upgrade4_running

from gpuplan.cli import run
from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions, ApplyResult
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.driver.rollout import STATE_LABEL
from gpuplan.planner.driver.step import DriverRollout
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.api.store import Event
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.local import LocalFileBackend

OLD, NEW = "580.105.08", "595.91.07"
NEW_IMAGE = f"nvcr.io/nvidia/driver:{NEW}-ubuntu24.04"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
NODES = [f"gpu-node-{i}" for i in range(1, 5)]


def _spec_text(version: str, eviction_timeout: int = 30) -> str:
    return (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: upgrade}\nspec:\n"
        f'  driver:\n    version: "{version}"\n    healthTimeoutSeconds: 60\n'
        f"    upgradePolicy: {{podDeletion: {{force: true, timeoutSeconds: {eviction_timeout}}}}}\n"
    )


@dataclass
class Witness:
    """Node and pod events from the simulator's store, in order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    cordoned_now: set[str] = field(default_factory=set)
    most_cordoned: int = 0
    cordons: list[tuple[str, bool]] = field(default_factory=list)
    deleted_pods: list[str] = field(default_factory=list)

    def hear(self, event: Event) -> None:
        with self.lock:
            if event.rt.kind == "Node":
                name = event.object["metadata"]["name"]
                now = bool((event.object.get("spec") or {}).get("unschedulable"))
                was = bool(((event.old or {}).get("spec") or {}).get("unschedulable"))
                if now != was:
                    self.cordons.append((name, now))
                    (self.cordoned_now.add if now else self.cordoned_now.discard)(name)
                    self.most_cordoned = max(self.most_cordoned, len(self.cordoned_now))
            elif event.rt.kind == "Pod" and event.type == "DELETED":
                self.deleted_pods.append(
                    f"{event.object['metadata']['namespace']}/{event.object['metadata']['name']}"
                )


@dataclass
class Stack:
    sim: Simulator
    writer: KubernetesWriter
    backend: LocalFileBackend
    witness: Witness
    kubeconfig: Path
    events: list[ApplyEvent] = field(default_factory=list)

    def apply(self, version: str, eviction_timeout: int = 30) -> ApplyResult:
        spec = parse_spec(_spec_text(version, eviction_timeout), filename="gpustack.yaml")
        with self.backend.locked("apply"):
            state = self.backend.read()
            plan = make_plan(spec, state, refresh.refresh(self.writer, spec, state))
            rollout = DriverRollout(spec, resource_versions=plan.resource_versions)
            options = ApplyOptions(driver_rollout=rollout, poll_seconds=0.5)
            return apply(
                plan, spec=spec, backend=self.backend, writer=self.writer, hooks=self, options=options
            )

    def on_event(self, event: ApplyEvent) -> None:
        self.events.append(event)

    def nodes(self) -> dict[str, dict[str, Any]]:
        rt = self.sim.store.registry.for_kind("v1", "Node")
        assert rt is not None
        return {n["metadata"]["name"]: n for n in self.sim.store.list(rt).items}

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.sim.store.registry.for_kind("v1", "Pod")
        assert rt is not None
        items: list[dict[str, Any]] = self.sim.store.list(rt, namespace=namespace).items
        return items

    def driver_images(self) -> dict[str, str]:
        return {
            p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"]
            for p in self.pods("gpu-operator")
            if p["metadata"]["name"].startswith("nvidia-driver-daemonset")
            and not p["metadata"].get("deletionTimestamp")
        }

    def create_workloads(self) -> None:
        """One GPU training pod per node (as a Job's pod would be: controller-owned, force covers the
        rest)."""
        rt = self.sim.store.registry.for_kind("v1", "Pod")
        assert rt is not None
        for node in NODES:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"train-{node}", "namespace": "default"},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            }
            self.sim.store.create(rt, pod, manager="kubectl")

    def create_guarded_workload(self, node: str) -> None:
        """A one-replica Deployment's GPU pod on ``node`` under a PodDisruptionBudget with
        ``maxUnavailable: 0``: no eviction of it is ever allowed."""
        store = self.sim.store
        deployments = store.registry.for_kind("apps/v1", "Deployment")
        pods = store.registry.for_kind("v1", "Pod")
        budgets = store.registry.for_kind("policy/v1", "PodDisruptionBudget")
        assert deployments is not None and pods is not None and budgets is not None
        container = {
            "name": "serve",
            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
        labels = {"app": "inference"}
        deployment = store.create(
            deployments,
            {
                "metadata": {"name": "inference"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                },
            },
            namespace="default",
            manager="kubectl",
        )
        owner = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "inference",
            "uid": deployment["metadata"]["uid"],
            "controller": True,
        }
        pod = {
            "metadata": {"name": "inference-0", "labels": labels, "ownerReferences": [owner]},
            "spec": {"nodeName": node, "containers": [container]},
        }
        store.create(pods, pod, namespace="default", manager="kubectl")
        budget = {
            "metadata": {"name": "inference"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        }
        store.create(budgets, budget, namespace="default", manager="kubectl")
        assert self.sim.wait_for(
            lambda: store.get(budgets, "default", "inference")["status"].get("currentHealthy") == 1, 30
        )


@pytest.fixture
def stack(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Stack]:
    """upgrade4 with the stack of the OLD driver already running, adopted into the state by the first apply
    (which so restarts nothing; installing from nothing is the ``bare`` fixture's test)."""
    sim = upgrade4_running(sim_factory, parse_spec(_spec_text(OLD), filename="gpustack.yaml"))
    with _watched(sim, tmp_path) as running:
        yield running


@contextlib.contextmanager
def _watched(sim: Simulator, folder: Path) -> Iterator[Stack]:
    """A writer, a state beside it and a witness of every store event on ``sim``, closed afterwards."""
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    backend = LocalFileBackend(folder / "gpuplan.state.json")
    witness = Witness()
    unsubscribe = sim.store.subscribe(witness.hear)
    try:
        yield Stack(sim, writer, backend, witness, kubeconfig)
    finally:
        unsubscribe()
        writer.close()
        backend.close()


def _installed(stack: Stack) -> None:
    first = stack.apply(OLD)
    assert first.ok, first.message
    assert stack.witness.cordons == []  # adopting the running driver restarts nothing
    assert {
        n: node["metadata"]["labels"].get(DRIVER_LABEL) for n, node in stack.nodes().items()
    } == dict.fromkeys(NODES, OLD)
    stack.witness.cordons.clear()
    stack.events.clear()


@pytest.mark.slow
def test_a_driver_version_change_rolls_one_node_at_a_time(stack: Stack) -> None:
    _installed(stack)
    stack.create_workloads()
    result = stack.apply(NEW)
    assert result.ok, result.message
    assert "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset" in result.changed
    # 25% of four nodes: never more than one cordoned, each cordoned then uncordoned, in order
    assert stack.witness.most_cordoned == 1
    assert stack.witness.cordons == [(node, on) for node in NODES for on in (True, False)]
    assert sorted(p for p in stack.witness.deleted_pods if p.startswith("default/")) == sorted(
        f"default/train-{node}" for node in NODES
    )
    nodes = stack.nodes()
    assert {name: n["metadata"]["labels"].get(DRIVER_LABEL) for name, n in nodes.items()} == dict.fromkeys(
        NODES, NEW
    )
    assert {name: n["metadata"]["labels"].get(STATE_LABEL) for name, n in nodes.items()} == dict.fromkeys(
        NODES, "upgrade-done"
    )
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())
    assert stack.driver_images() == dict.fromkeys(NODES, NEW_IMAGE)
    notes = [e.message for e in stack.events if e.type == "note"]
    assert "driver: node 1/4 gpu-node-1 cordon-required" in notes
    assert "driver: node 4/4 gpu-node-4 upgrade-done" in notes


@pytest.mark.slow
def test_a_crash_looping_driver_stops_at_the_first_node_and_puts_the_old_one_back(stack: Stack) -> None:
    _installed(stack)
    stack.sim.set_image_fault(NEW_IMAGE, "CrashLoopBackOff")
    result = stack.apply(NEW)
    assert not result.ok
    failure = result.failed[0]
    assert failure.component == "driver"
    assert "gpu-node-1" in failure.message and "CrashLoopBackOff" in failure.message
    assert "old driver runs again" in failure.message
    # only the first node was touched: cordoned, restored, uncordoned; the others never cordoned
    assert [node for node, _ in stack.witness.cordons] == ["gpu-node-1", "gpu-node-1"]
    assert stack.witness.most_cordoned == 1
    nodes = stack.nodes()
    assert {name: n["metadata"]["labels"].get(DRIVER_LABEL) for name, n in nodes.items()} == dict.fromkeys(
        NODES, OLD
    )
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())
    assert set(stack.driver_images().values()) == {f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"}
    again = stack.apply(OLD)  # the state still says OLD: nothing to do
    assert again.ok and again.changed == []


@pytest.mark.slow
def test_gpuplan_rollback_returns_to_the_old_driver_node_by_node(stack: Stack, tmp_path: Path) -> None:
    _installed(stack)
    assert stack.apply(NEW).ok
    stack.witness.cordons.clear()
    spec = tmp_path / "gpustack.yaml"  # beside gpuplan.state.json, so the state is found as the CLI finds it
    spec.write_text(_spec_text(NEW))
    assert run(["--kubeconfig", str(stack.kubeconfig), "rollback", "-f", str(spec), "--auto-approve"]) == 0
    nodes = stack.nodes()
    assert {name: n["metadata"]["labels"].get(DRIVER_LABEL) for name, n in nodes.items()} == dict.fromkeys(
        NODES, OLD
    )
    assert stack.witness.cordons == [(node, on) for node in NODES for on in (True, False)]
    assert set(stack.driver_images().values()) == {f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"}
    history = stack.backend.read()
    assert history is not None and len(history.history) == 3
    assert history.history[2].spec_digest == history.history[0].spec_digest


@pytest.mark.slow
def test_a_disruption_budget_that_refuses_the_eviction_stops_the_rollout_naming_it(stack: Stack) -> None:
    """The budget answers 429 at every try: the node's pod-deletion step retries every 5 s for its
    podDeletion.timeoutSeconds (5 here), then the rollout stops there with the budget's reason and a hint,
    and puts the old driver back; the guarded pod is never deleted."""
    _installed(stack)
    stack.create_guarded_workload("gpu-node-1")
    result = stack.apply(NEW, eviction_timeout=5)
    assert not result.ok
    failure = result.failed[0]
    assert (failure.component, failure.reason, failure.node, failure.pod) == (
        "driver",
        "EvictionTimeout",
        "gpu-node-1",
        "inference-0",
    )
    assert (
        "gpu-node-1: a PodDisruptionBudget still forbids evicting default/inference-0 after 5s "
        "(The disruption budget inference needs 1 healthy pods and has 1 currently); hint: let that budget "
        "allow a disruption (kubectl get pdb -n default)" in failure.message
    )
    assert "upgradePolicy.podDeletion.timeoutSeconds" in failure.message
    pods = stack.sim.store.registry.for_kind("v1", "Pod")
    assert pods is not None
    assert stack.sim.store.get(pods, "default", "inference-0")["metadata"].get("deletionTimestamp") is None
    assert "default/inference-0" not in stack.witness.deleted_pods
    # the rollout stopped at its first node and left it as it was: old driver, schedulable
    assert [node for node, _ in stack.witness.cordons] == ["gpu-node-1", "gpu-node-1"]
    assert not any(n["spec"].get("unschedulable") for n in stack.nodes().values())
    assert set(stack.driver_images().values()) == {f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"}


@pytest.fixture
def bare(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Stack]:
    """upgrade4 as it comes: no driver, no stack."""
    sim = sim_factory("upgrade4", tls=False)
    assert sim.wait_idle(30)
    with _watched(sim, tmp_path) as running:
        yield running


@pytest.mark.slow
def test_a_driver_installed_from_nothing_is_verified_once_gfd_reports_it(bare: Stack) -> None:
    """The driver's gate is its rollout; the version gate waits for GFD (later in the walk) and then
    passes."""
    result = bare.apply(OLD)
    assert result.ok, result.message
    order = [(e.component, e.gate) for e in bare.events if e.type == "progress" and e.state == "passed"]
    assert ("driver", "rollout") in order and ("driver", "driver-version") in order
    gfd_passed = next(i for i, (component, _) in enumerate(order) if component == "gfd")
    assert order.index(("driver", "driver-version")) > gfd_passed
    assert {
        n: node["metadata"]["labels"].get(DRIVER_LABEL) for n, node in bare.nodes().items()
    } == dict.fromkeys(NODES, OLD)
    assert not any("unverified" in e.message for e in bare.events)


@pytest.mark.slow
def test_without_gfd_or_an_exporter_the_driver_version_is_a_warning(bare: Stack) -> None:
    text = _spec_text(OLD) + "  gfd: {owner: none}\n  dcgmExporter: {owner: none}\n"
    spec = parse_spec(text, filename="gpustack.yaml")
    with bare.backend.locked("apply"):
        plan = make_plan(spec, None, refresh.refresh(bare.writer, spec, None))
        result = apply(
            plan,
            spec=spec,
            backend=bare.backend,
            writer=bare.writer,
            hooks=bare,
            options=ApplyOptions(driver_rollout=DriverRollout(spec), poll_seconds=0.5),
        )
    assert result.ok, result.message
    notes = [e.message for e in bare.events if e.type == "note"]
    assert "warning: driver version unverified: no GFD or DCGM exporter on these nodes" in notes
