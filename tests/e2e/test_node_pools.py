"""Node pools end to end on the simulator: a V100 and an H100 node, each in its pool with its own driver
release (design §7.1). The driver pod on each node is its pool's DaemonSet's, each node reports its pool's
version, and the default DaemonSet lands on neither; a rollback puts the previous generation back."""

from __future__ import annotations

import copy
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import run
from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions, ApplyResult
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.driver.step import DriverRollout
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan import planfile
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.plan.model import Plan
from gpuplan.planner.plan.rollback import rollback_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.document import parse_state
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import to_json
from gpuplan.views import plan_human

VOLTA, HOPPER = "580.105.08", "595.91.07"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
GPU_PRESENT = "nvidia.com/gpu.present"


def pool_labels(labels: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The pools' own node labels: every GPU node also carries gpuplan's ``gpu.present``."""
    kept = {node: {k: v for k, v in values.items() if k != GPU_PRESENT} for node, values in labels.items()}
    return {node: values for node, values in kept.items() if values}


def pool_label_changes(plan: Plan) -> list[Any]:
    return [n for n in plan.node_labels if n.label != GPU_PRESENT]


SCENARIO: dict[str, Any] = {
    "nodes": [
        {
            "name": "v100-node",
            "gpu": {"model": "v100", "count": 2},
            "os": "ubuntu24.04",
            "kernel": "6.8.0-101-generic",
            "labels": {"pool": "volta"},
        },
        {
            "name": "h100-node",
            "gpu": {"model": "h100-80gb", "count": 2},
            "os": "ubuntu24.04",
            "kernel": "6.8.0-101-generic",
            "labels": {"pool": "hopper"},
        },
    ],
    "timing": {"podReadySeconds": 0.05},
}


def spec_text(volta: str = VOLTA, hopper: str = HOPPER) -> str:
    return f"""apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {{name: pools}}
spec:
  driver: {{version: "{HOPPER}", healthTimeoutSeconds: 60}}
  nodePools:
    - name: volta
      nodeSelector: {{pool: volta}}
      driver: {{version: "{volta}"}}
    - name: hopper
      nodeSelector: {{pool: hopper}}
      driver: {{version: "{hopper}"}}
"""


class Cluster:
    def __init__(self, sim: Simulator, folder: Path) -> None:
        self.sim, self.folder = sim, folder
        self.kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
        self.writer = KubernetesWriter(kubeconfig=str(self.kubeconfig))
        self.backend = LocalFileBackend(folder / "gpuplan.state.json")
        self.events: list[ApplyEvent] = []

    def plan(self, spec: Spec) -> Plan:
        state = self.backend.read()
        return make_plan(spec, state, refresh.refresh(self.writer, spec, state))

    def apply(self, spec: Spec) -> ApplyResult:
        with self.backend.locked("apply"):
            plan = self.plan(spec)
            options = ApplyOptions(
                driver_rollout=DriverRollout(spec, resource_versions=plan.resource_versions),
                poll_seconds=0.5,
            )
            return apply(
                plan, spec=spec, backend=self.backend, writer=self.writer, hooks=self, options=options
            )

    def on_event(self, event: ApplyEvent) -> None:
        self.events.append(event)

    def items(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.sim.store.registry.for_kind("v1", kind)
        assert rt is not None
        found: list[dict[str, Any]] = self.sim.store.list(rt, namespace=namespace).items
        return found

    def driver_pods(self) -> dict[str, tuple[str, str]]:
        """node -> (owning DaemonSet, image) of its live driver pod."""
        return {
            pod["spec"]["nodeName"]: (
                pod["metadata"]["ownerReferences"][0]["name"],
                pod["spec"]["containers"][0]["image"],
            )
            for pod in self.items("Pod", "gpu-operator")
            if pod["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
            and not pod["metadata"].get("deletionTimestamp")
        }

    def driver_pod_uids(self) -> dict[str, str]:
        """node -> the uid of its live driver pod."""
        return {
            pod["spec"]["nodeName"]: pod["metadata"]["uid"]
            for pod in self.items("Pod", "gpu-operator")
            if pod["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
            and not pod["metadata"].get("deletionTimestamp")
        }

    def reported(self) -> dict[str, str | None]:
        return {n["metadata"]["name"]: n["metadata"]["labels"].get(DRIVER_LABEL) for n in self.items("Node")}

    def cli(self, capsys: pytest.CaptureFixture[str], spec: str, *args: str) -> tuple[int, Any]:
        """``gpuplan --kubeconfig ... ARGS -f SPEC --json`` (or ``--format json``), its JSON output parsed."""
        spec_file = self.folder / "gpustack.yaml"
        spec_file.write_text(spec)
        capsys.readouterr()
        code = run(["--kubeconfig", str(self.kubeconfig), *args, "-f", str(spec_file)])
        return code, json.loads(capsys.readouterr().out)

    def close(self) -> None:
        self.writer.close()
        self.backend.close()


@pytest.fixture
def cluster(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Cluster]:
    sim = sim_factory(SCENARIO, tls=False)
    assert sim.wait_idle(30)
    running = Cluster(sim, tmp_path)
    try:
        yield running
    finally:
        running.close()


@pytest.mark.slow
def test_each_pool_runs_its_own_driver_release(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    spec = parse_spec(spec_text(), filename="gpustack.yaml")
    result = cluster.apply(spec)
    assert result.ok, result.message
    assert cluster.driver_pods() == {
        "v100-node": ("nvidia-driver-daemonset-volta", f"nvcr.io/nvidia/driver:{VOLTA}-ubuntu24.04"),
        "h100-node": ("nvidia-driver-daemonset-hopper", f"nvcr.io/nvidia/driver:{HOPPER}-ubuntu24.04"),
    }
    assert cluster.reported() == {"v100-node": VOLTA, "h100-node": HOPPER}
    pods = cluster.items("Pod", "gpu-operator")
    pool_of = {
        p["spec"]["nodeName"]: p["metadata"]["labels"].get("gpuplan.io/pool")
        for p in pods
        if p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
    }
    assert pool_of == {"v100-node": "volta", "h100-node": "hopper"}
    again = cluster.plan(spec)
    assert not again.has_changes, [c.address for c in again.changes if c.action != "no-op"]
    assert again.pools == {"volta": ["v100-node"], "hopper": ["h100-node"]}
    code, report = cluster.cli(capsys, spec_text(), "drift", "report", "--format", "json")
    assert report["findings"] == [] and code == 0
    assert {n["name"]: n["pool"] for n in report["nodes"]} == {"h100-node": "hopper", "v100-node": "volta"}
    assert {n["name"]: n["components"]["driver"]["status"] for n in report["nodes"]} == {
        "h100-node": "ok",
        "v100-node": "ok",
    }
    code, listing = cluster.cli(capsys, spec_text(), "inventory", "--json")
    assert {n["name"]: n["pool"] for n in listing["nodes"]} == {"h100-node": "hopper", "v100-node": "volta"}


def test_a_node_two_pools_select_blocks_the_plan(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        spec_text()
        + "    - name: big\n      nodeSelector: {kubernetes.io/hostname: v100-node}\n"
        + f'      driver: {{version: "{VOLTA}"}}\n'
    )
    spec = parse_spec(text, filename="gpustack.yaml")
    plan = cluster.plan(spec)
    assert [b for b in plan.blockers if "node pools" in b] == [
        "compatibility error on node v100-node: node v100-node is selected by node pools 'volta' and 'big'; "
        "a node may belong to one pool only"
    ]
    spec_file = cluster.folder / "gpustack.yaml"
    spec_file.write_text(text)
    capsys.readouterr()
    assert run(["--kubeconfig", str(cluster.kubeconfig), "plan", "-f", str(spec_file)]) == 1
    shown = capsys.readouterr().out
    assert "Error: node v100-node: node v100-node is selected by node pools 'volta' and 'big'" in " ".join(
        shown.split()
    )
    assert "This plan cannot be applied:" in shown
    code = run(["--kubeconfig", str(cluster.kubeconfig), "apply", "-f", str(spec_file), "--auto-approve"])
    assert code == 1 and "selected by node pools" in capsys.readouterr().err


GFD_LABELS = {
    "v100-node": {
        "nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB",
        "nvidia.com/gpu.family": "volta",
        "nvidia.com/gpu.compute.major": "7",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "2",
    },
    "h100-node": {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "2",
    },
}
V100_REFUSED = (
    "driver 595.91.07 does not support Tesla-V100-SXM2-32GB (volta): the last driver branch for Volta and "
    "older GPUs is R580"
)


@pytest.mark.parametrize("labelled", [False, True], ids=["nfd-only", "gfd-labelled"])
@pytest.mark.parametrize(
    ("text", "scope", "field"),
    [
        (spec_text(volta=HOPPER), "node pool volta: ", "nodePools[volta].driver.version"),
        (spec_text().split("  nodePools:")[0], "", "driver.version"),
    ],
    ids=["both-pools-595", "no-pools-595"],
)
def test_595_for_the_whole_fleet_is_refused_at_plan_time_naming_the_v100_node(
    sim_factory: SimFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    labelled: bool,
    text: str,
    scope: str,
    field: str,
) -> None:
    """The V100 + H100 fleet given 595 everywhere: on a fresh cluster GFD never ran on, NFD's NodeFeature
    names the V100, as GFD's labels do once it has run; either way the plan is refused before anything is
    applied, one Error naming the pool, the node, its GPU and the rule, with the version to pin."""
    monkeypatch.setenv("COLUMNS", "10000")
    scenario = copy.deepcopy(SCENARIO)
    for node in scenario["nodes"]:
        if labelled:
            node["labels"] = {**node["labels"], **GFD_LABELS[node["name"]]}
    sim = sim_factory(scenario, tls=False)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec_file, saved = tmp_path / "gpustack.yaml", tmp_path / "fleet.plan"
    spec_file.write_text(text)
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--out", str(saved)])
    out, err = capsys.readouterr()
    assert code == 1
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [
        f"Error: driver, node v100-node: {scope}{V100_REFUSED}"
    ]
    assert f"Hint: pin {field} to a 580 release (e.g. 580.105.08)" in err
    source = "GFD labels" if labelled else "NFD NodeFeature"
    shown = [" ".join(line.split()) for line in out.splitlines()]
    assert f"{source} Tesla-V100-SXM2-32GB (volta): 1 node (v100-node)" in shown, "the source it used"
    assert not saved.exists(), "a refused plan is not saved"


@pytest.mark.slow
def test_each_pool_rolls_its_driver_node_by_node_by_its_own_upgrade_policy(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    """Two V100 nodes in the volta pool, whose upgradePolicy alone drains: the volta DaemonSet's new
    release rolls over its two nodes one after the other, each drained, and the hopper node's driver pod is
    left as it was."""
    scenario = copy.deepcopy(SCENARIO)
    volta = scenario["nodes"][0]
    volta.pop("name")
    volta |= {"namePrefix": "v100-", "count": 2}
    sim = sim_factory(scenario, tls=False)
    assert sim.wait_idle(30)
    cluster = Cluster(sim, tmp_path)
    try:
        assert cluster.apply(parse_spec(spec_text(), filename="gpustack.yaml")).ok
        hopper_pod = cluster.driver_pod_uids()["h100-node"]
        newer = "580.126.09"
        text = spec_text(volta=newer).replace(
            f'{{version: "{newer}"}}', f'{{version: "{newer}", upgradePolicy: {{drain: {{enable: true}}}}}}'
        )
        cluster.events.clear()
        result = cluster.apply(parse_spec(text, filename="gpustack.yaml"))
        assert result.ok, result.message
        steps = [e.message for e in cluster.events if e.type == "note" and e.component == "driver"]
        states = (
            "cordon-required",
            "pod-deletion-required",
            "drain-required",
            "pod-restart-required",
            "validation-required",
            "uncordon-required",
            "upgrade-done",
        )
        assert steps == [
            f"driver: node {number}/2 {node} {state}"
            for number, node in ((1, "v100-1"), (2, "v100-2"))
            for state in states
        ]
        assert cluster.reported() == {"v100-1": newer, "v100-2": newer, "h100-node": HOPPER}
        assert cluster.driver_pod_uids()["h100-node"] == hopper_pod, "another pool's driver is not touched"
    finally:
        cluster.close()


MIXED = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: mixed}
spec:
  driver: {owner: external, version: "580.105.08", healthTimeoutSeconds: 60}
  toolkit: {owner: external}
  nodePools:
    - name: ampere
      nodeSelector: {kubernetes.io/hostname: a100-node}
      driver: {version: "570.195.03"}
"""


@pytest.mark.slow
def test_the_mixed_fleet_plans_and_applies_clean_with_a_pool_per_external_version(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    sim = sim_factory("mixed", tls=False)
    assert sim.wait_idle(30)
    cluster = Cluster(sim, tmp_path)
    try:
        spec = parse_spec(MIXED, filename="gpustack.yaml")
        plan = cluster.plan(spec)
        assert plan.blockers == ()
        result = cluster.apply(spec)
        assert result.ok, result.message
        assert not [e for e in cluster.events if "unverified" in e.message]
        assert [e.message for e in cluster.events if e.type == "progress" and e.gate == "driver-version"]
        assert cluster.reported() == {
            "a100-node": "570.195.03",
            "h100-node": VOLTA,
            "l40s-node": VOLTA,
            "rtx-node": VOLTA,
        }
        status = cluster.plan(spec).components["driver"]
        assert (status.status, status.detail) == (
            "verified",
            "verified 570.195.03, 580.105.08 (each node pool's) on 4/4 nodes",
        )
        without_pool = parse_spec(MIXED.split("  nodePools:")[0], filename="gpustack.yaml")
        blockers = cluster.plan(without_pool).blockers
        assert any("a100-node" in b and "570.195.03" in b for b in blockers), blockers
    finally:
        cluster.close()


SHARED_SCENARIO: dict[str, Any] = {
    "nodes": [
        {
            "name": name,
            "gpu": {"model": "l40s", "count": 2},
            "os": "ubuntu24.04",
            "kernel": "6.8.0-101-generic",
            "driver": "580.105.08",
            "toolkit": "1.18.1",
            "labels": labels,
        }
        for name, labels in (("infer-node", {"pool": "inference"}), ("plain-node", {}))
    ],
    "faults": {"images": {"nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9-broken": "CrashLoopBackOff"}},
    "timing": {"podReadySeconds": 0.05},
}
HOST_STACK = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: shared}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
"""
INFERENCE_POOL = """  nodePools:
    - name: inference
      nodeSelector: {pool: inference}
      devicePlugin: {config: {timeSlicing: {replicas: 4}}}
"""


def allocatable(cluster: Cluster) -> dict[str, str | None]:
    return {
        n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu") for n in cluster.items("Node")
    }


def config_labels(cluster: Cluster) -> dict[str, str | None]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/device-plugin.config")
        for n in cluster.items("Node")
    }


@pytest.fixture
def shared(sim_factory: SimFactory, tmp_path: Path) -> Iterator[Cluster]:
    sim = sim_factory(SHARED_SCENARIO, tls=False)
    assert sim.wait_idle(30)
    running = Cluster(sim, tmp_path)
    try:
        yield running
    finally:
        running.close()


@pytest.mark.slow
def test_a_time_slicing_pool_labels_its_nodes_and_shows_its_capacity(
    shared: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = parse_spec(HOST_STACK + INFERENCE_POOL, filename="gpustack.yaml")
    plan = shared.plan(spec)
    assert [c.describe() for c in plan.capacity] == ["inference: nvidia.com/gpu 2 -> 8 (time-slicing x4)"]
    assert [(n.pool, n.label, n.value, n.nodes) for n in pool_label_changes(plan)] == [
        ("inference", "nvidia.com/device-plugin.config", "inference", ["infer-node"])
    ]
    assert plan.pools == {"inference": ["infer-node"]}
    assert [n for n in plan.document()["node_labels"] if n["label"] != GPU_PRESENT][0]["before"] == {
        "infer-node": None
    }
    text = plan_human.render(plan.document(), width=110)
    assert (
        "Node pools:\n"
        "  inference: 1 node (infer-node)\n"
        "    capacity: nvidia.com/gpu 2 -> 8 (time-slicing x4)\n"
        "    label 1 node (infer-node) nvidia.com/device-plugin.config=inference\n"
    ) in text
    result = shared.apply(spec)
    assert result.ok, result.message
    assert config_labels(shared) == {"infer-node": "inference", "plain-node": None}
    assert allocatable(shared) == {"infer-node": "8", "plain-node": "2"}
    state = shared.backend.read()
    assert state is not None
    assert pool_labels(state.node_labels) == {"infer-node": {"nvidia.com/device-plugin.config": "inference"}}
    again = shared.plan(spec)
    assert again.node_labels == () and not again.has_changes
    # a hand-made change of the label is drift, which the next plan reverts
    shared.writer.label_node("infer-node", {"nvidia.com/device-plugin.config": "default"})
    code, report = shared.cli(capsys, HOST_STACK + INFERENCE_POOL, "drift", "report", "--format", "json")
    assert code == 2
    [finding] = [f for f in report["findings"] if f["node"] == "infer-node"]
    assert (finding["component"], finding["detail"]) == (
        "devicePlugin",
        "label nvidia.com/device-plugin.config of node infer-node changed outside gpuplan: "
        "metadata.labels.nvidia.com/device-plugin.config: 'inference' -> 'default'",
    )
    assert [(n.value, n.before) for n in pool_label_changes(shared.plan(spec))] == [
        ("inference", {"infer-node": "default"})
    ]
    # the pool removed: gpuplan takes its label off the node again
    plain = parse_spec(HOST_STACK, filename="gpustack.yaml")
    removal = shared.plan(plain)
    assert [(n.pool, n.value, n.nodes) for n in pool_label_changes(removal)] == [(None, None, ["infer-node"])]
    assert shared.apply(plain).ok
    assert config_labels(shared) == {"infer-node": None, "plain-node": None}
    # the rollback plan to the generation with the pool writes its label again
    state = shared.backend.read()
    assert state is not None and pool_labels(state.node_labels) == {}
    pooled = next(g for g in reversed(state.history) if pool_labels(g.node_labels))
    assert pool_labels(pooled.node_labels) == {"infer-node": {"nvidia.com/device-plugin.config": "inference"}}
    back = rollback_plan(plain, state, refresh.refresh(shared.writer, plain, state), pooled)
    assert [(n.value, n.nodes) for n in pool_label_changes(back)] == [("inference", ["infer-node"])]


@pytest.mark.slow
def test_a_failed_apply_puts_the_node_labels_back(shared: Cluster) -> None:
    first = shared.apply(parse_spec(HOST_STACK, filename="gpustack.yaml"))
    assert first.ok, first.message
    broken = (
        HOST_STACK + "  dcgmExporter: {version: 9.9.9-broken, healthTimeoutSeconds: 20}\n" + INFERENCE_POOL
    )
    result = shared.apply(parse_spec(broken, filename="gpustack.yaml"))
    assert not result.ok
    assert config_labels(shared) == {"infer-node": None, "plain-node": None}
    state = shared.backend.read()
    assert state is not None and pool_labels(state.node_labels) == {}


@pytest.mark.slow
def test_the_pools_survive_a_saved_plan_and_the_state_file(shared: Cluster) -> None:
    spec = parse_spec(HOST_STACK + INFERENCE_POOL, filename="gpustack.yaml")
    plan = shared.plan(spec)
    loaded = planfile.loads(planfile.dumps(plan))
    assert loaded.node_labels == plan.node_labels and loaded.capacity == plan.capacity
    assert loaded.pools == {"inference": ["infer-node"]}
    assert shared.apply(spec).ok
    text = (shared.folder / "gpuplan.state.json").read_text()
    state = parse_state(text, source="gpuplan.state.json")
    assert pool_labels(state.node_labels) == {"infer-node": {"nvidia.com/device-plugin.config": "inference"}}
    assert to_json(state) == text
    assert state.history[-1].node_labels == state.node_labels


@pytest.mark.slow
def test_a_removed_pool_hands_its_nodes_to_the_stack_driver(cluster: Cluster) -> None:
    assert cluster.apply(parse_spec(spec_text(), filename="gpustack.yaml")).ok
    without_hopper = parse_spec(spec_text().split("    - name: hopper")[0], filename="gpustack.yaml")
    result = cluster.apply(without_hopper)
    assert result.ok, result.message
    # the stack's driver rollout rolls only its own pods: the volta pool's pod (same app label) is left alone
    assert cluster.driver_pods() == {
        "v100-node": ("nvidia-driver-daemonset-volta", f"nvcr.io/nvidia/driver:{VOLTA}-ubuntu24.04"),
        "h100-node": ("nvidia-driver-daemonset", f"nvcr.io/nvidia/driver:{HOPPER}-ubuntu24.04"),
    }
    assert cluster.reported() == {"v100-node": VOLTA, "h100-node": HOPPER}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [1, 2])
def test_a_label_write_killed_at_its_journal_step_converges_and_rolls_back_exactly(
    shared: Cluster, kill_at: int
) -> None:
    """kill -9 right after the label's intent (1: not written yet) or its record (2): the next apply writes
    or keeps it, recorded; the rollback to the generation before the pool removes it again."""
    from apply_process import gpuplan

    assert shared.apply(parse_spec(HOST_STACK, filename="gpustack.yaml")).ok
    spec_file = shared.folder / "gpustack.yaml"
    spec_file.write_text(HOST_STACK + INFERENCE_POOL)
    args = ("-f", str(spec_file), "--state", str(shared.backend.path), "--auto-approve")
    killed = gpuplan(shared.kubeconfig, "apply", *args, env={"GPUPLAN_TEST_KILL_AT": str(kill_at)})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    state = shared.backend.read()
    assert state is not None
    [entry] = state.journal
    assert (entry.address, entry.state) == (
        "devicePlugin/Node/infer-node",
        "pending" if kill_at == 1 else "done",
    )
    assert config_labels(shared)["infer-node"] == (None if kill_at == 1 else "inference")

    resumed = gpuplan(shared.kubeconfig, "apply", *args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert config_labels(shared) == {"infer-node": "inference", "plain-node": None}
    state = shared.backend.read()
    assert state is not None and state.journal == ()
    assert pool_labels(state.node_labels) == {"infer-node": {"nvidia.com/device-plugin.config": "inference"}}

    before_pool = next(g for g in state.history if not pool_labels(g.node_labels))
    back = gpuplan(shared.kubeconfig, "rollback", *args, "--to", str(before_pool.number))
    assert back.returncode == 0, back.stdout + back.stderr
    assert config_labels(shared) == {"infer-node": None, "plain-node": None}
    state = shared.backend.read()
    assert state is not None and pool_labels(state.node_labels) == {}


@pytest.mark.slow
def test_a_rollback_judges_its_gates_by_the_generations_pools(
    shared: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """The generation had the time-slicing pool, the current spec has none: the rollback's allocatable gate
    expects 4 per GPU on the pool's node (the generation's pools), not the stack's 1."""
    quick = HOST_STACK + "  devicePlugin: {healthTimeoutSeconds: 30}\n"
    assert shared.apply(parse_spec(quick + INFERENCE_POOL, filename="gpustack.yaml")).ok
    assert shared.apply(parse_spec(quick, filename="gpustack.yaml")).ok
    assert allocatable(shared) == {"infer-node": "2", "plain-node": "2"}
    state = shared.backend.read()
    assert state is not None
    pooled = next(g for g in reversed(state.history) if pool_labels(g.node_labels))
    assert [pool["name"] for pool in pooled.node_pools] == ["inference"]

    spec_file = shared.folder / "gpustack.yaml"
    spec_file.write_text(quick)
    code = run(
        [
            "--kubeconfig",
            str(shared.kubeconfig),
            "rollback",
            "-f",
            str(spec_file),
            "--state",
            str(shared.backend.path),
            "--to",
            str(pooled.number),
            "--auto-approve",
        ]
    )
    assert code == 0, capsys.readouterr().out
    assert allocatable(shared) == {"infer-node": "8", "plain-node": "2"}
    assert config_labels(shared) == {"infer-node": "inference", "plain-node": None}


def test_an_mps_pool_shares_its_nodes_gpus_and_shows_its_replicas(
    shared: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    mps_pool = INFERENCE_POOL.replace("timeSlicing: {replicas: 4}", "mps: {replicas: 4}")
    spec = parse_spec(HOST_STACK + mps_pool, filename="gpustack.yaml")
    plan = shared.plan(spec)
    assert [c.describe() for c in plan.capacity] == ["inference: nvidia.com/gpu 2 -> 8 (MPS x4)"]
    assert shared.apply(spec).ok
    assert allocatable(shared) == {"infer-node": "8", "plain-node": "2"}
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in shared.items("Node")}
    assert [
        labels["infer-node"][f"nvidia.com/{key}"] for key in ("gpu.replicas", "gpu.sharing-strategy")
    ] == [
        "4",
        "mps",
    ]
    assert labels["plain-node"]["nvidia.com/gpu.sharing-strategy"] == "none"
    daemons = {
        p["spec"]["nodeName"]
        for p in shared.items("Pod", "gpu-operator")
        if p["metadata"]["name"].startswith("nvidia-device-plugin-mps-control-daemon")
    }
    assert daemons == {"infer-node"}, "the MPS control daemon runs on the pool's node only"
    assert not shared.plan(spec).has_changes
    code, listing = shared.cli(capsys, HOST_STACK + mps_pool, "inventory", "--json")
    sharing = {row["name"]: row["sharing"] for row in listing["nodes"]}
    assert code == 0 and sharing["infer-node"] == {"strategy": "mps", "replicas": 4, "shared_gpus": 8}
