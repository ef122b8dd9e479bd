"""roll_driver against an in-memory cluster: batching under maxUnavailable and maxParallelUpgrades, the order
of steps per node, cordon bookkeeping (a node cordoned by someone else stays cordoned; one cordoned by an
earlier run is uncordoned), GPU pod selection and the deletion rules, failures that stop the rollout, and
the rollback roll that puts the old driver back on the nodes already changed."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gpuplan.modules.driver import UpgradePolicy, driver_release
from gpuplan.planner.apply.journal import Recorder
from gpuplan.planner.apply.model import ApplyOptions, NullHooks, Outcome
from gpuplan.planner.apply.steps import StepContext, perform, undo
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.diff.guard import OwnedFieldsChanged
from gpuplan.planner.driver.gate import UpgradeCheck, failed_creates
from gpuplan.planner.driver.node import gpu_pods_on, refusal, untargeted
from gpuplan.planner.driver.rollout import (
    INITIAL_UNSCHEDULABLE,
    STATE_LABEL,
    NodeProgress,
    max_unavailable_nodes,
    roll_driver,
)
from gpuplan.planner.driver.step import (
    PER_NODE_QUERIES,
    DriverRollout,
    DriverRolloutFailed,
    eviction_notes,
    pods_to_evict,
)
from gpuplan.planner.health.gates import in_sync
from gpuplan.planner.observe import refresh
from gpuplan.planner.placement import runs_on as places
from gpuplan.planner.plan.build import Change, Reason, make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.kubernetes_write import DriftDetected, Listing
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.providers.watch import WatchEvent
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.model import StateFile

NS = "gpu-operator"
DS = ObjectKey("apps/v1", "DaemonSet", NS, "nvidia-driver-daemonset")
DS_UID = "ds-uid"
Obj = dict[str, Any]


class FakeCluster:
    """Nodes, pods and the driver DaemonSet; deleting a driver pod makes the controller's replacement at the
    current generation, which gets Ready (or crash-loops on a node listed in ``crash_on``). Every mutation is
    logged, so tests can replay how many nodes were cordoned at each moment."""

    def __init__(self, nodes: int = 4, *, version: str = "580.105.08") -> None:
        self.now = 0.0
        self.version = 1
        self.names = itertools.count(1)
        self.log: list[tuple[str, str]] = []
        self.crash_on: set[str] = set()
        self.crash_version: str | None = None
        """When set, only pods of this driver version crash on the ``crash_on`` nodes."""
        self.pdb_refusals: dict[str, int] = {}
        self.refusals: dict[str, str] = {}
        """driver version -> the error the API server refuses the controller's new pods of it with (a
        FailedCreate Event on the DaemonSet, counted up on each repeat, as client-go's correlator does)."""
        self.taint_on_restart: dict[str, Obj] = {}
        """node -> a taint someone adds to it while its driver pod restarts."""
        self.events: dict[str, Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.versions = {1: version}
        self.ds: Obj = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": DS.name, "namespace": NS, "uid": DS_UID, "generation": 1},
            "spec": {
                "selector": {"matchLabels": {"app": DS.name}},
                "template": {"spec": {"containers": _containers(version)}},
            },
        }
        for n in range(1, nodes + 1):
            name = f"gpu-node-{n}"
            self.nodes[name] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "resourceVersion": "1", "labels": {}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
            self._driver_pod(name, 1)

    # --- scenario helpers
    def new_template(self, version: str) -> None:
        generation = self.ds["metadata"]["generation"] + 1
        self.ds["metadata"]["generation"] = generation
        self.ds["spec"]["template"]["spec"]["containers"] = _containers(version)
        self.versions[generation] = version

    def workload(
        self,
        node: str,
        name: str,
        *,
        gpu: bool = True,
        controller: bool = True,
        volumes: list[Obj] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        limits = {"nvidia.com/gpu": "1"} if gpu else {"cpu": "1"}
        refs = [{"kind": "ReplicaSet", "name": "rs", "uid": "rs", "controller": True}] if controller else []
        self.pods[("default", name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "ownerReferences": refs,
                "labels": dict(labels or {}),
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"limits": limits}}],
                "volumes": volumes or [],
            },
            "status": {"phase": "Running"},
        }

    def cordoned(self) -> set[str]:
        return {name for name, node in self.nodes.items() if node["spec"].get("unschedulable")}

    def driver_generation(self, node: str) -> int:
        pods = [
            p
            for p in self.pods.values()
            if p["spec"]["nodeName"] == node and p["metadata"]["labels"].get("app") == DS.name
        ]
        assert len(pods) == 1
        return int(pods[0]["metadata"]["labels"]["pod-template-generation"])

    def _driver_pod(self, node: str, generation: int) -> None:
        name = f"{DS.name}-{next(self.names)}"
        crashing = node in self.crash_on and self.crash_version in (None, self.versions[generation])
        status: Obj = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False" if crashing else "True"}],
        }
        if crashing:
            status["containerStatuses"] = [
                {
                    "name": "nvidia-driver-ctr",
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": "back-off restarting failed container",
                        }
                    },
                }
            ]
        self.pods[(NS, name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": f"uid-{name}",
                "creationTimestamp": f"{name:0>40}",
                "labels": {
                    "app": DS.name,
                    "pod-template-generation": str(generation),
                    "controller-revision-hash": f"hash-{self.versions[generation]}",
                    "gpuplan.io/stack": "up",
                },
                "ownerReferences": [{"kind": "DaemonSet", "uid": DS_UID, "controller": True}],
            },
            "spec": {"nodeName": node, "containers": _containers(self.versions[generation])},
            "status": status,
        }
        if not crashing:
            labels = self.nodes[node]["metadata"]["labels"]
            labels["nvidia.com/cuda.driver-version.full"] = self.versions[generation]

    # --- the RolloutClient protocol (providers/protocols.py)
    def read(self, key: ObjectKey) -> LiveObject | None:
        if key.kind == "DaemonSet":
            return LiveObject(key, copy.deepcopy(self.ds))
        if key.kind == "Node":
            node = self.nodes.get(key.name)
            return LiveObject(key, copy.deepcopy(node)) if node else None
        raise AssertionError(key)

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        wanted = dict(term.split("=", 1) for term in (label_selector or "").split(",") if term)
        node = field_selector.split("=", 1)[1] if field_selector else None
        pods = [
            p
            for (ns, _), p in sorted(self.pods.items())
            if (namespace is None or ns == namespace)
            and (node is None or p["spec"]["nodeName"] == node)
            and all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        return Listing(tuple(LiveObject(ObjectKey.of(p), copy.deepcopy(p)) for p in pods), "1")

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        return Listing(tuple(LiveObject(ObjectKey.of(n), copy.deepcopy(n)) for n in self.nodes.values()), "1")

    def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        if kind == "Event":
            wanted = dict(term.split("=", 1) for term in (field_selector or "").split(",") if term)
            fields = {"involvedObject.kind": "DaemonSet", "involvedObject.name": DS.name}
            found = [
                e
                for e in self.events.values()
                if all(
                    {**fields, "reason": e["reason"], "type": e["type"]}.get(k, v) == v
                    for k, v in wanted.items()
                )
            ]
            return Listing(
                tuple(
                    LiveObject(ObjectKey("v1", "Event", NS, e["metadata"]["name"]), copy.deepcopy(e))
                    for e in found
                ),
                str(self.version),
            )
        assert kind == "ControllerRevision"
        return Listing((), None)  # like the simulator: no ControllerRevisions served

    def cordon(self, node: str, on: bool = True) -> LiveObject:
        self.log.append(("cordon" if on else "uncordon", node))
        spec = self.nodes[node]["spec"]
        if on:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        return LiveObject(ObjectKey("v1", "Node", None, node), self.nodes[node])

    def evict(self, pod: ObjectKey) -> bool:
        if self.pdb_refusals.get(pod.name, 0) > 0:
            self.pdb_refusals[pod.name] -= 1
            return False
        self.log.append(("evict", pod.name))
        self.pods.pop((str(pod.namespace), pod.name), None)
        return True

    def delete_pod(self, pod: ObjectKey, *, grace_seconds: int | None = None) -> bool:
        old = self.pods.pop((str(pod.namespace), pod.name))
        node = old["spec"]["nodeName"]
        self.log.append(("restart", node))
        if node in self.taint_on_restart:
            self.nodes[node]["spec"].setdefault("taints", []).append(self.taint_on_restart[node])
        self._create(node)
        return True

    def _sync(self) -> None:
        """The controller's sync after a spec write: a pod on each node that has none and is placed."""
        driven = {
            p["spec"]["nodeName"] for p in self.pods.values() if p["metadata"]["labels"].get("app") == DS.name
        }
        for node in sorted(set(self.nodes) - driven):
            self._create(node)

    def _create(self, node: str) -> None:
        if not places(self.ds["spec"]["template"]["spec"], self.nodes[node]):
            return  # the controller makes no pod on a node its DaemonSet does not place
        refusal = self.refusals.get(self.versions[self.ds["metadata"]["generation"]])
        if refusal is not None:
            self.failed_create(refusal)
            return
        self._driver_pod(node, self.ds["metadata"]["generation"])

    def failed_create(self, error: str, name: str = f"{DS.name}.1") -> None:
        """The DaemonSet controller's Warning Event of a refused create (a repeat raises its count)."""
        self.version += 1
        event = self.events.setdefault(
            name,
            {
                "metadata": {"name": name, "namespace": NS},
                "involvedObject": {"kind": "DaemonSet", "name": DS.name, "namespace": NS, "uid": DS_UID},
                "reason": "FailedCreate",
                "type": "Warning",
                "count": 0,
            },
        )
        event["count"] += 1
        event["message"] = f"Error creating: {error}"
        event["lastTimestamp"] = f"{self.version:0>20}"
        event["metadata"]["resourceVersion"] = str(self.version)

    def apply(
        self, obj: Mapping[str, Any], *, expected_rv: str | None = "*", dry_run: bool = False
    ) -> LiveObject:
        if obj["kind"] == "DaemonSet":  # a new template is a new generation; the same one changes nothing
            self.log.append(("apply", str(expected_rv)))
            version = driver_release(obj)
            assert version is not None
            if version != self.versions[self.ds["metadata"]["generation"]]:
                self.new_template(version)
            self._sync()
            return LiveObject(DS, copy.deepcopy(self.ds))
        assert obj["kind"] == "Node"
        metadata = self.nodes[obj["metadata"]["name"]]["metadata"]
        metadata["labels"].update(obj["metadata"]["labels"])
        annotations = metadata.setdefault("annotations", {})
        annotations.pop(
            INITIAL_UNSCHEDULABLE, None
        )  # server-side apply drops what the manager stopped sending
        annotations.update(obj["metadata"].get("annotations") or {})
        self.log.append(("state", f"{obj['metadata']['name']}={obj['metadata']['labels'][STATE_LABEL]}"))
        return LiveObject(ObjectKey.of(obj), self.nodes[obj["metadata"]["name"]])

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
        self.now += float(kwargs.get("timeout") or 1.0)  # nothing will change: the wait uses its time up
        return iter(())

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _containers(version: str) -> list[Obj]:
    return [{"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-ubuntu24.04"}]


def _roll(
    cluster: FakeCluster,
    nodes: list[str] | None = None,
    *,
    version: str | None = None,
    timeout: float = 60.0,
    refusals_before: frozenset[str] | None = None,
    **policy: Any,
) -> Any:
    progress: list[NodeProgress] = []
    check = UpgradeCheck(
        DS,
        expected_version=version,
        validator_selector=None,
        timeout_seconds=timeout,
        refusals_before=refusals_before,
    )
    result = roll_driver(
        cluster,
        daemonset=DS,
        nodes=nodes or sorted(cluster.nodes),
        policy=UpgradePolicy.model_validate(policy),
        gate=check,
        hooks=progress.append,
        clock=cluster.clock,
        sleep=cluster.sleep,
    )
    return result, progress


def _max_cordoned(log: list[tuple[str, str]], initially: set[str] | None = None) -> int:
    cordoned, most = set(initially or ()), 0
    for action, node in log:
        if action == "cordon":
            cordoned.add(node)
        elif action == "uncordon":
            cordoned.discard(node)
        most = max(most, len(cordoned))
    return most


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [("25%", 4, 1), ("25%", 5, 2), ("1", 10, 1), ("100%", 3, 3), ("0", 4, 0), (2, 9, 2)],
)
def test_max_unavailable_rounds_percentages_up(value: Any, total: int, expected: int) -> None:
    assert max_unavailable_nodes(value, total) == expected


def test_one_node_at_a_time_each_cordoned_restarted_validated_uncordoned() -> None:
    cluster = FakeCluster(4)
    cluster.new_template("595.91.07")
    result, progress = _roll(cluster, version="595.91.07")
    assert result.ok, result.message
    assert result.upgraded == result.restarted == ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
    assert _max_cordoned(cluster.log) == 1
    node_steps = [(a, n) for a, n in cluster.log if a in ("cordon", "restart", "uncordon")]
    assert node_steps == [
        (step, f"gpu-node-{i}") for i in range(1, 5) for step in ("cordon", "restart", "uncordon")
    ]
    assert all(cluster.driver_generation(n) == 2 for n in cluster.nodes)
    assert cluster.cordoned() == set()
    states = [p.state for p in progress if p.node == "gpu-node-2"]
    assert states == [
        "cordon-required",
        "pod-deletion-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "upgrade-done",
    ]
    assert {p.total for p in progress} == {4} and [
        p.index for p in progress if p.state == "upgrade-done"
    ] == [1, 2, 3, 4]
    assert all(n["metadata"]["labels"][STATE_LABEL] == "upgrade-done" for n in cluster.nodes.values())


def test_max_unavailable_and_parallel_upgrades_bound_the_batches() -> None:
    cluster = FakeCluster(8)
    cluster.new_template("595.91.07")
    result, _ = _roll(cluster, max_unavailable="50%", max_parallel_upgrades=3)
    assert result.ok
    assert _max_cordoned(cluster.log) == 3  # 50% of 8 allows 4, three in parallel at most
    result_unlimited, _ = _roll(_upgraded(FakeCluster(8)), max_unavailable="50%", max_parallel_upgrades=0)
    assert result_unlimited.ok


def _upgraded(cluster: FakeCluster) -> FakeCluster:
    cluster.new_template("595.91.07")
    return cluster


def test_nodes_unavailable_for_other_reasons_use_up_slots() -> None:
    cluster = _upgraded(FakeCluster(8))
    cluster.nodes["gpu-node-8"]["status"]["conditions"][0]["status"] = "False"  # NotReady
    result, _ = _roll(
        cluster, [f"gpu-node-{i}" for i in range(1, 8)], max_unavailable="25%", max_parallel_upgrades=0
    )
    assert result.ok
    assert _max_cordoned(cluster.log) == 1  # 25% of 8 is 2, the NotReady node holds one


def test_a_node_cordoned_by_someone_else_goes_first_and_stays_cordoned() -> None:
    cluster = _upgraded(FakeCluster(4))
    cluster.nodes["gpu-node-3"]["spec"]["unschedulable"] = True
    result, progress = _roll(cluster, max_unavailable="50%")
    assert result.ok
    assert result.upgraded[0] == "gpu-node-3"
    assert cluster.cordoned() == {"gpu-node-3"}
    assert ("uncordon", "gpu-node-3") not in cluster.log
    assert _max_cordoned(cluster.log, {"gpu-node-3"}) == 2  # node 3 holds one of the two slots throughout
    assert INITIAL_UNSCHEDULABLE not in cluster.nodes["gpu-node-3"]["metadata"]["annotations"]
    done = next(p for p in progress if p.node == "gpu-node-3" and p.state == "upgrade-done")
    assert "left cordoned" in done.message


def test_a_node_cordoned_by_someone_else_can_use_up_the_only_slot() -> None:
    """25% of 4 is one node, and the cordoned node is it: it is upgraded (that costs nothing), the others
    cannot be taken down, and the rollout says so instead of waiting forever."""
    cluster = _upgraded(FakeCluster(4))
    cluster.nodes["gpu-node-3"]["spec"]["unschedulable"] = True
    result, _ = _roll(cluster)
    assert not result.ok and result.failure is not None
    assert result.upgraded == ("gpu-node-3",)
    assert (result.failure.reason, result.failure.node) == ("NoUpgradeSlot", "gpu-node-1")
    assert "others are unavailable" in result.failure.message


def test_gpu_pods_are_evicted_before_the_driver_restarts_and_others_stay() -> None:
    cluster = _upgraded(FakeCluster(2))
    cluster.workload("gpu-node-1", "train-a")
    cluster.workload("gpu-node-1", "web", gpu=False)
    cluster.workload("gpu-node-2", "train-b")
    result, _ = _roll(cluster)
    assert result.ok and result.evicted == ("default/train-a", "default/train-b")
    assert ("default", "web") in cluster.pods
    assert cluster.log.index(("evict", "train-a")) < cluster.log.index(("restart", "gpu-node-1"))
    assert cluster.log.index(("cordon", "gpu-node-1")) < cluster.log.index(("evict", "train-a"))


def test_a_budget_that_refuses_eviction_is_retried_until_the_timeout() -> None:
    cluster = _upgraded(FakeCluster(1))
    cluster.workload("gpu-node-1", "train-a")
    cluster.pdb_refusals["train-a"] = 2
    assert _roll(cluster)[0].ok
    cluster = _upgraded(FakeCluster(1))
    cluster.workload("gpu-node-1", "train-a")
    cluster.pdb_refusals["train-a"] = 1000
    result, _ = _roll(cluster, pod_deletion={"timeoutSeconds": 30})
    assert not result.ok and result.failure is not None
    assert (result.failure.node, result.failure.reason, result.failure.pod) == (
        "gpu-node-1",
        "EvictionTimeout",
        "train-a",
    )
    assert result.restarted == ()  # the driver was never touched


def test_a_node_left_cordoned_by_a_failed_eviction_is_only_uncordoned_when_restored() -> None:
    cluster = _upgraded(FakeCluster(2))
    cluster.workload("gpu-node-1", "train-a")
    cluster.pdb_refusals["train-a"] = 1000
    failed, _ = _roll(cluster, pod_deletion={"timeoutSeconds": 30})
    assert failed.failure is not None and failed.failure.reason == "EvictionTimeout"
    assert cluster.cordoned() == {"gpu-node-1"}
    cluster.new_template("580.105.08")  # the old template back: the node's pod already runs it
    cluster.log.clear()
    result, progress = _roll(cluster, ["gpu-node-1", "gpu-node-2"])
    assert result.ok, result.message
    assert [entry for entry in cluster.log if entry[0] != "state"] == [
        ("cordon", "gpu-node-1"),
        ("uncordon", "gpu-node-1"),
    ]
    assert result.skipped == ("gpu-node-2",) and result.restarted == ()
    assert "pod-deletion-required" not in [p.state for p in progress]
    assert cluster.cordoned() == set()


def test_unmanaged_and_emptydir_gpu_pods_need_force_and_delete_empty_dir() -> None:
    cluster = _upgraded(FakeCluster(1))
    cluster.workload("gpu-node-1", "bare", controller=False)
    result, _ = _roll(cluster)
    assert not result.ok and result.failure is not None
    assert result.failure.reason == "PodDeletionRefused" and "force" in result.failure.message
    assert cluster.nodes["gpu-node-1"]["metadata"]["labels"][STATE_LABEL] == "upgrade-failed"
    assert _roll(cluster, pod_deletion={"force": True})[0].ok
    scratch = FakeCluster(1)
    scratch.workload("gpu-node-1", "scratch", volumes=[{"name": "tmp", "emptyDir": {}}])
    pod = scratch.pods[("default", "scratch")]
    assert "deleteEmptyDir" in str(refusal(pod, force=False, delete_empty_dir=False))
    assert refusal(pod, force=False, delete_empty_dir=True) is None


def test_in_sync_by_generation_then_revision_hash_then_what_the_containers_run() -> None:
    cluster = FakeCluster(1)
    pod = next(iter(cluster.pods.values()))
    assert in_sync(pod, cluster.ds)  # generation 1 both
    cluster.new_template("580.105.08")  # same template again: generation 2
    assert in_sync(pod, cluster.ds, "hash-580.105.08") and not in_sync(pod, cluster.ds, "hash-other")
    assert in_sync(pod, cluster.ds)  # hash unknown: the containers run what the template says
    cluster.ds["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "KERNEL_MODULE_TYPE", "value": "open"}
    ]
    assert not in_sync(pod, cluster.ds)
    cluster.new_template("595.91.07")
    assert not in_sync(pod, cluster.ds)


def test_gpu_pods_on_selects_live_gpu_and_mig_consumers_not_operands() -> None:
    cluster = FakeCluster(2)
    cluster.workload("gpu-node-1", "a")
    cluster.workload("gpu-node-2", "b")
    cluster.workload("gpu-node-1", "cpu", gpu=False)
    mig = copy.deepcopy(cluster.pods[("default", "a")])
    mig["metadata"]["name"] = "mig"
    mig["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/mig-1g.10gb": "1"}}
    done = copy.deepcopy(cluster.pods[("default", "a")])
    done["metadata"]["name"], done["status"]["phase"] = "finished", "Succeeded"
    pods = [*cluster.pods.values(), mig, done]
    assert [p["metadata"]["name"] for p in gpu_pods_on(["gpu-node-1"], pods)] == ["a", "mig"]
    assert [p["metadata"]["name"] for p in gpu_pods_on(["gpu-node-1", "gpu-node-2"], pods)] == [
        "a",
        "mig",
        "b",
    ]


def test_a_failing_node_stops_the_rollout_and_stays_cordoned() -> None:
    cluster = _upgraded(FakeCluster(4))
    cluster.crash_on.add("gpu-node-1")
    result, _ = _roll(cluster)
    assert not result.ok and result.failure is not None
    assert (result.failure.node, result.failure.reason, result.failure.step) == (
        "gpu-node-1",
        "CrashLoopBackOff",
        "pod-restart",
    )
    assert result.failure.pod is not None and result.failure.pod.startswith(DS.name)
    assert result.restarted == ("gpu-node-1",) and result.upgraded == ()
    assert cluster.cordoned() == {"gpu-node-1"}
    assert [n for a, n in cluster.log if a == "restart"] == ["gpu-node-1"]  # nodes 2-4 untouched
    assert "gpu-node-1" in result.message and "CrashLoopBackOff" in result.message


def test_the_rollback_roll_restores_the_failed_node_and_uncordons_it() -> None:
    cluster = _upgraded(FakeCluster(4))
    cluster.crash_on.add("gpu-node-1")
    failed, _ = _roll(cluster)
    cluster.crash_on.clear()
    cluster.new_template("580.105.08")  # the walker restores the old template: generation 3, the old hash
    result, _ = _roll(
        cluster, list(failed.restarted) + ["gpu-node-2", "gpu-node-3", "gpu-node-4"], version="580.105.08"
    )
    assert result.ok, result.message
    assert result.restarted == ("gpu-node-1",)  # the others already run the old template (by its hash)
    assert set(result.skipped) == {"gpu-node-2", "gpu-node-3", "gpu-node-4"}
    assert cluster.cordoned() == set()  # cordoned by the failed run: this run knows it and uncordons
    assert (
        cluster.nodes["gpu-node-1"]["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
        == "580.105.08"
    )


def test_a_node_that_never_reports_the_version_times_out_with_what_is_missing() -> None:
    cluster = _upgraded(FakeCluster(1))
    result, _ = _roll(cluster, version="999.1.1", timeout=30)
    assert not result.ok and result.failure is not None
    assert result.failure.reason == "Timeout"
    assert "reports driver 595.91.07, expected 999.1.1" in result.failure.message


def test_skip_label_and_up_to_date_nodes_are_left_alone() -> None:
    cluster = _upgraded(FakeCluster(3))
    cluster.nodes["gpu-node-2"]["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade.skip"] = "true"
    result, _ = _roll(cluster)
    assert result.ok and result.skipped == ("gpu-node-2",)
    again, _ = _roll(cluster)
    assert again.ok and again.restarted == () and again.upgraded == ()
    assert set(again.skipped) == set(cluster.nodes)


def test_no_free_slot_is_a_failure_not_a_hang() -> None:
    cluster = _upgraded(FakeCluster(4))
    result, _ = _roll(cluster, max_unavailable="0")
    assert not result.ok and result.failure is not None and result.failure.reason == "NoUpgradeSlot"
    assert cluster.log == []


def test_drain_evicts_what_kubectl_drain_would() -> None:
    cluster = _upgraded(FakeCluster(1))
    cluster.workload("gpu-node-1", "web", gpu=False)
    cluster.workload(
        "gpu-node-1", "keep", gpu=False, labels={"nvidia.com/gpu-driver-upgrade-drain.skip": "true"}
    )
    cluster.workload("gpu-node-1", "db", gpu=False, labels={"tier": "db"})
    result, progress = _roll(cluster, drain={"enable": True, "podSelector": "tier!=db"})
    assert result.ok
    assert result.evicted == ("default/web",)
    assert {("default", "keep"), ("default", "db")} <= set(cluster.pods)
    assert "drain-required" in [p.state for p in progress]


# ------------------------------------------------------------------------------ the apply walker's adapter


def _driver_manifest(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS.name, "namespace": NS},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-ubuntu24.04"}
                    ]
                }
            }
        },
    }


def _change(old: str, new: str) -> Change:
    return Change(
        address=f"driver/DaemonSet/{NS}/{DS.name}",
        component="driver",
        kind="DaemonSet",
        object=DS.ref,
        action="update",
        reason=Reason.UPDATE_BECAUSE_SPEC_CHANGED,
        reason_text="",
        before=_driver_manifest(old),
        after=_driver_manifest(new),
    )


def _adapter(cluster: FakeCluster) -> DriverRollout:
    spec = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
        "  driver: {version: '595.91.07', healthTimeoutSeconds: 30}\n",
        filename="gpustack.yaml",
    )
    return DriverRollout(spec, resource_versions={DS.ref: "41"}, clock=cluster.clock, sleep=cluster.sleep)


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04", "595.91.07"),
        ("nvcr.io/nvidia/driver:580.105.08-rhel9", "580.105.08"),
        ("registry:5000/nvidia/driver:570.195.03-ubuntu22.04", "570.195.03"),
        ("nvcr.io/nvidia/driver:580-6.8.0-101-generic-ubuntu24.04", None),
        ("nvcr.io/nvidia/driver@sha256:" + "a" * 64, None),
        ("registry:5000/nvidia/driver", None),
    ],
)
def test_driver_release_reads_the_image_tag(image: str, release: str | None) -> None:
    manifest = _driver_manifest("0")
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = image
    assert driver_release(manifest) == release


def test_the_adapter_applies_the_new_spec_at_the_planned_version_then_rolls_every_node() -> None:
    cluster = FakeCluster(3)
    notes: list[str] = []
    rollout = _adapter(cluster)
    live = rollout(_change("580.105.08", "595.91.07"), cluster, notes.append)
    assert live.manifest["metadata"]["generation"] == 2
    assert cluster.log[0] == ("apply", "41")  # the plan's resourceVersion: the writer's drift guard
    assert all(cluster.driver_generation(node) == 2 for node in cluster.nodes)
    assert rollout.restarted == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert (
        "driver: node 1/3 gpu-node-1 cordon-required" in notes
        and notes[-1] == "driver: node 3/3 gpu-node-3 upgrade-done"
    )


def test_status_writes_racing_the_new_spec_are_written_through_and_a_hand_edit_is_drift() -> None:
    """The DaemonSet controller moves the resourceVersion with status writes: the guard re-reads and writes at
    the new version while gpuplan's fields are as planned, and stops when one of them changed."""
    cluster = FakeCluster(2)
    cluster.ds["metadata"]["resourceVersion"] = "43"
    cluster.ds["spec"]["template"]["spec"]["containers"] = _driver_manifest("580.105.08")["spec"]["template"][
        "spec"
    ]["containers"]
    plain_read = cluster.read

    def conflicted(obj: Mapping[str, Any], **kwargs: Any) -> LiveObject:
        # the plan read 41; two status writes (42, 43) land before gpuplan's write
        if obj["kind"] == "DaemonSet" and kwargs.get("expected_rv") in {"41", "42"}:
            cluster.log.append(("apply", str(kwargs["expected_rv"])))
            raise DriftDetected(DS, expected=str(kwargs["expected_rv"]), found=plain_read(DS))
        return FakeCluster.apply(cluster, obj, **kwargs)

    cluster.apply = conflicted  # type: ignore[method-assign]
    reads = iter(["42", "43"])

    def read(key: ObjectKey) -> LiveObject | None:
        live = plain_read(key)
        if live is not None and key.kind == "DaemonSet":
            live.manifest["metadata"]["resourceVersion"] = next(reads, "43")
        return live

    cluster.read = read  # type: ignore[method-assign]
    live = _adapter(cluster)(_change("580.105.08", "595.91.07"), cluster)
    assert [entry for entry in cluster.log if entry[0] == "apply"][:3] == [
        ("apply", "41"),
        ("apply", "42"),
        ("apply", "43"),
    ]
    assert live.manifest["metadata"]["generation"] == 2

    edited = FakeCluster(2)
    edited.ds["spec"]["template"]["spec"]["containers"] = _driver_manifest("575.57.08")["spec"]["template"][
        "spec"
    ]["containers"]
    edited.apply = lambda obj, **kwargs: (_ for _ in ()).throw(  # type: ignore[method-assign]
        DriftDetected(DS, expected="41", found=edited.read(DS))
    )
    with pytest.raises(OwnedFieldsChanged, match="changed since the plan"):
        _adapter(edited)(_change("580.105.08", "595.91.07"), edited)


def test_a_failed_node_is_restored_before_the_adapter_raises() -> None:
    cluster = FakeCluster(3)
    cluster.crash_on.add("gpu-node-2")
    rollout = _adapter(cluster)

    def heal_on_restore(obj: Mapping[str, Any], **kwargs: Any) -> LiveObject:
        if driver_release(obj) == "580.105.08":
            cluster.crash_on.clear()  # the old image works
        return FakeCluster.apply(cluster, obj, **kwargs)

    cluster.apply = heal_on_restore  # type: ignore[method-assign]
    with pytest.raises(DriverRolloutFailed) as raised:
        rollout(_change("580.105.08", "595.91.07"), cluster)
    error = raised.value
    assert (error.node, error.reason, error.restored) == ("gpu-node-2", "CrashLoopBackOff", True)
    assert error.pod is not None and "gpu-node-2" in error.summary
    assert "gpu-node-1, gpu-node-2" in error.detail
    assert [cluster.versions[cluster.driver_generation(n)] for n in sorted(cluster.nodes)] == [
        "580.105.08"
    ] * 3
    assert [n for a, n in cluster.log if a == "restart"] == [
        "gpu-node-1",
        "gpu-node-2",
        "gpu-node-2",
        "gpu-node-1",
    ]
    assert cluster.cordoned() == set()


def test_without_restore_the_failed_node_is_left_as_the_operator_leaves_it() -> None:
    cluster = FakeCluster(2)
    cluster.crash_on.add("gpu-node-1")
    spec = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
        "  driver: {version: '595.91.07', healthTimeoutSeconds: 30}\n",
        filename="gpustack.yaml",
    )
    rollout = DriverRollout(spec, clock=cluster.clock, sleep=cluster.sleep, restore=False)
    with pytest.raises(DriverRolloutFailed) as raised:
        rollout(_change("580.105.08", "595.91.07"), cluster)
    assert not raised.value.restored and "no rollback" in raised.value.detail
    assert cluster.cordoned() == {"gpu-node-1"}
    assert cluster.nodes["gpu-node-1"]["metadata"]["labels"][STATE_LABEL] == "upgrade-failed"
    assert cluster.ds["metadata"]["generation"] == 2


def test_undoing_a_finished_rollout_rolls_the_restarted_nodes_first() -> None:
    cluster = FakeCluster(3)
    rollout = _adapter(cluster)
    rollout(_change("580.105.08", "595.91.07"), cluster)
    cluster.log.clear()
    rollout(_change("595.91.07", "580.105.08"), cluster)  # the walker undoing it after a later failure
    assert [n for a, n in cluster.log if a == "restart"] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert all(cluster.versions[cluster.driver_generation(n)] == "580.105.08" for n in cluster.nodes)


# ----------------------------------------------------------------- the adapter inside the walker and its undo


def _walker_parts() -> tuple[MemoryBackend, Recorder]:
    backend = MemoryBackend()
    return backend, Recorder(backend, StateFile.new())


def test_undoing_a_driver_step_rolls_the_old_driver_back_onto_the_nodes() -> None:
    """A later component failed: undo must put the old driver on every node, not only the old spec back."""
    cluster = FakeCluster(3)
    rollout = _adapter(cluster)
    _, recorder = _walker_parts()
    ctx = StepContext(
        writer=cluster,
        recorder=recorder,
        resource_versions={DS.ref: "41"},  # type: ignore[arg-type]
        delete_timeout=5,
        driver_rollout=rollout,
    )
    step = perform(_change("580.105.08", "595.91.07"), ctx)
    assert step is not None and all(
        cluster.versions[cluster.driver_generation(n)] == "595.91.07" for n in cluster.nodes
    )
    cluster.log.clear()
    undo_ctx = StepContext(
        writer=cluster,
        recorder=recorder,
        resource_versions={},  # type: ignore[arg-type]
        delete_timeout=5,
        driver_rollout=rollout,
    )
    assert undo(step, undo_ctx) == DS
    assert [n for a, n in cluster.log if a == "restart"] == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert all(cluster.versions[cluster.driver_generation(n)] == "580.105.08" for n in cluster.nodes)
    assert cluster.cordoned() == set() and not recorder.state.pending_journal()


def test_the_walker_reports_where_a_driver_rollout_stopped() -> None:
    """DriverRolloutFailed becomes the Failure's node, pod and reason, not a bare ApiError."""
    cluster = FakeCluster(2)
    cluster.crash_on.update(cluster.nodes)
    spec = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
        "  driver: {version: '595.91.07', healthTimeoutSeconds: 30}\n",
        filename="gpustack.yaml",
    )
    rollout = DriverRollout(spec, clock=cluster.clock, sleep=cluster.sleep, restore=False)
    empty = make_plan(spec, None, refresh.refresh(FakeKubernetes(), spec, None))
    plan = empty.model_copy(
        update={"changes": (_change("580.105.08", "595.91.07"),), "namespace_exists": True}
    )
    backend, _ = _walker_parts()
    result = apply(
        plan,
        spec=spec,
        backend=backend,
        writer=cluster,
        hooks=NullHooks(),  # type: ignore[arg-type]
        options=ApplyOptions(driver_rollout=rollout, rollback=False),
    )
    assert not result.ok
    [failure] = result.failed
    assert (failure.node, failure.reason, failure.gate) == (
        "gpu-node-1",
        "CrashLoopBackOff",
        "driver-rollout",
    )
    assert failure.pod is not None and failure.pod.startswith(DS.name)
    assert "gpu-node-1" in failure.describe() and failure.pod in failure.describe()


@pytest.mark.parametrize("restorable", [True, False], ids=["restored", "restore-failed"])
def test_a_failed_driver_rollout_says_whether_it_rolled_back(restorable: bool) -> None:
    """The rollout puts the old driver back on the nodes it changed before it raises: the apply's result and
    its --json summary say the change was rolled back (they said nothing was undone); when putting it back
    fails too, the rollback is incomplete (it was called complete, 'as before this apply')."""
    cluster = FakeCluster(2)
    cluster.crash_on.add("gpu-node-2")
    cluster.crash_version = "595.91.07" if restorable else None
    spec = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
        "  driver: {version: '595.91.07', healthTimeoutSeconds: 30}\n",
        filename="gpustack.yaml",
    )
    rollout = DriverRollout(spec, clock=cluster.clock, sleep=cluster.sleep)
    empty = make_plan(spec, None, refresh.refresh(FakeKubernetes(), spec, None))
    change = _change("580.105.08", "595.91.07")
    plan = empty.model_copy(update={"changes": (change,), "namespace_exists": True})
    backend, _ = _walker_parts()
    events: list[Any] = []

    class Hooks:
        def on_event(self, event: Any) -> None:
            events.append(event)

    result = apply(
        plan,
        spec=spec,
        backend=backend,
        writer=cluster,
        hooks=Hooks(),  # type: ignore[arg-type]
        options=ApplyOptions(driver_rollout=rollout),
    )
    [summary] = [event for event in events if event.type == "summary"]
    if restorable:
        assert result.outcome is Outcome.ROLLED_BACK and result.rolled_back == [change.address], (
            result.message
        )
        assert "Rolled back: 1 change(s) undone" in result.message and summary.rolled_back is True
        assert all(cluster.versions[cluster.driver_generation(n)] == "580.105.08" for n in cluster.nodes)
    else:
        assert result.outcome is Outcome.ROLLBACK_INCOMPLETE and not result.rolled_back, result.message
        assert "Rollback incomplete" in result.message and "restoring the old driver failed" in result.message
        assert summary.rolled_back is False


def _disruptive(change: Change, nodes: list[str]) -> Change:
    return change.model_copy(update={"disruptive": True, "nodes": tuple(nodes)})


def _recorded_pod_lists(cluster: FakeCluster) -> list[str | None]:
    """The field selector of every pod list made on ``cluster`` from now on."""
    queries: list[str | None] = []
    listing = cluster.list_pods

    def counted(**kwargs: Any) -> Listing:
        queries.append(kwargs.get("field_selector"))
        return listing(**kwargs)

    cluster.list_pods = counted  # type: ignore[method-assign]
    return queries


def test_the_pods_a_driver_change_evicts_are_read_node_by_node_and_named() -> None:
    cluster = FakeCluster(3)
    cluster.workload("gpu-node-1", "train-a")
    cluster.workload("gpu-node-1", "web", gpu=False)
    cluster.workload("gpu-node-3", "train-b")
    queries = _recorded_pod_lists(cluster)
    change = _disruptive(_change("580.105.08", "595.91.07"), ["gpu-node-1", "gpu-node-2", "gpu-node-3"])
    evicted = pods_to_evict(cluster, [change])
    assert evicted == {"gpu-node-1": ["default/train-a"], "gpu-node-3": ["default/train-b"]}
    assert queries == [f"spec.nodeName=gpu-node-{i}" for i in (1, 2, 3)]
    assert eviction_notes(evicted) == [
        "driver rollout evicts on gpu-node-1: default/train-a",
        "driver rollout evicts on gpu-node-3: default/train-b",
    ]


def test_beyond_the_per_node_limit_one_list_reads_every_pod() -> None:
    cluster = FakeCluster(PER_NODE_QUERIES + 2)
    for i in range(12):
        cluster.workload("gpu-node-1", f"train-{i:02}")
    queries = _recorded_pod_lists(cluster)
    evicted = pods_to_evict(cluster, [_disruptive(_change("580.105.08", "595.91.07"), sorted(cluster.nodes))])
    assert queries == [None] and len(evicted["gpu-node-1"]) == 12
    [line] = eviction_notes(evicted)
    assert line.endswith("default/train-09 and 2 more")


# ------------------------------------------------------------------- driver pods that will not come back

FORBIDDEN = 'pods "nvidia-driver-daemonset-" is forbidden: no PriorityClass with name gpu-missing was found'
TAINT = {"key": "maintenance", "value": "gpu", "effect": "NoSchedule"}
HOUR = 3600.0


def test_a_driver_pod_the_api_server_refuses_fails_at_once_with_the_servers_words() -> None:
    cluster = FakeCluster(3)
    cluster.refusals["595.91.07"] = FORBIDDEN
    rollout = DriverRollout(
        parse_spec(
            "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
            f"  driver: {{version: '595.91.07', healthTimeoutSeconds: {HOUR:.0f}}}\n",
            filename="gpustack.yaml",
        ),
        clock=cluster.clock,
        sleep=cluster.sleep,
    )
    with pytest.raises(DriverRolloutFailed) as raised:
        rollout(_change("580.105.08", "595.91.07"), cluster)
    error = raised.value
    assert (error.node, error.reason, error.restored) == ("gpu-node-1", "FailedCreate", True)
    assert (
        f"gpu-node-1: the DaemonSet controller cannot create the driver pod of {DS.name}: " in error.summary
    )
    assert f"Error creating: {FORBIDDEN}" in error.summary
    assert cluster.now < HOUR / 60, "judged from the Event, not at the node's timeout"
    # the old template is not refused: the controller makes the node's pod as the restore writes it
    assert [n for a, n in cluster.log if a == "restart"] == ["gpu-node-1"]
    assert [cluster.versions[cluster.driver_generation(n)] for n in sorted(cluster.nodes)] == [
        "580.105.08"
    ] * 3
    assert cluster.cordoned() == set()


def test_a_refusal_from_before_the_write_counts_for_nothing_and_its_repeat_counts() -> None:
    cluster = FakeCluster(2)
    cluster.failed_create("an earlier refusal")
    before = failed_creates(cluster, DS)
    _upgraded(cluster)
    result, _ = _roll(cluster, timeout=HOUR, refusals_before=before)
    assert result.ok, result.message  # the old Event does not fail a rollout whose pods come

    cluster.new_template("600.1.1")
    cluster.refusals["600.1.1"] = "quota exceeded"  # the same Event, counted up: a new resourceVersion
    result, _ = _roll(cluster, timeout=HOUR, refusals_before=failed_creates(cluster, DS))
    assert not result.ok and result.failure is not None
    assert (result.failure.node, result.failure.reason) == ("gpu-node-1", "FailedCreate")
    assert result.failure.message.endswith("Error creating: quota exceeded")
    assert cluster.now < HOUR / 60


def test_a_node_tainted_before_its_turn_fails_without_losing_its_driver_pod() -> None:
    cluster = _upgraded(FakeCluster(3))
    cluster.nodes["gpu-node-2"]["spec"]["taints"] = [TAINT]
    result, _ = _roll(cluster, timeout=HOUR)
    assert not result.ok and result.failure is not None
    assert (result.failure.node, result.failure.step, result.failure.reason) == (
        "gpu-node-2",
        "pod-restart",
        "NodeNotTargeted",
    )
    assert (
        f"gpu-node-2: DaemonSet {DS.name} no longer places a pod on the node: the node's taint "
        "maintenance=gpu:NoSchedule is not tolerated; hint: remove the taint "
        "(kubectl taint node gpu-node-2 maintenance:NoSchedule-)" in result.failure.message
    )
    assert [n for a, n in cluster.log if a == "restart"] == ["gpu-node-1"]
    assert cluster.driver_generation("gpu-node-2") == 1  # still runs the old driver
    assert cluster.now < HOUR / 60


def test_a_node_tainted_while_its_driver_restarts_fails_at_once_naming_the_taint() -> None:
    cluster = _upgraded(FakeCluster(2))
    cluster.taint_on_restart["gpu-node-1"] = {
        "key": "node.kubernetes.io/out-of-service",
        "effect": "NoExecute",
    }
    result, _ = _roll(cluster, timeout=HOUR, refusals_before=frozenset())
    assert not result.ok and result.failure is not None
    assert (result.failure.node, result.failure.reason) == ("gpu-node-1", "NodeNotTargeted")
    assert "node.kubernetes.io/out-of-service:NoExecute is not tolerated" in result.failure.message
    assert cluster.now < HOUR / 60


def test_a_cordon_or_a_not_ready_node_does_not_count_as_a_node_the_daemonset_left() -> None:
    cluster = FakeCluster(1)
    daemonset = cluster.ds
    node = cluster.nodes["gpu-node-1"]
    node["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    }
    assert untargeted(cluster, "gpu-node-1", daemonset) is None  # the controller tolerates a cordon
    node["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    assert untargeted(cluster, "gpu-node-1", daemonset) is None  # goes when the node is Ready again
    node["spec"]["taints"].append(TAINT)
    failure = untargeted(cluster, "gpu-node-1", daemonset)
    assert failure is not None and "maintenance=gpu:NoSchedule" in failure.message
    daemonset["spec"]["template"]["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    assert untargeted(cluster, "gpu-node-1", daemonset) is None
    daemonset["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.deploy.driver": "true"}
    failure = untargeted(cluster, "gpu-node-1", daemonset)
    assert failure is not None and (
        "its nodeSelector asks for label nvidia.com/gpu.deploy.driver=true, which is missing there"
        in failure.message
    )
