"""The deploy labels of the operator's pod-template shape: each DaemonSet's
``nvidia.com/gpu.deploy.<operand>``, set only where a node has no value for it (the operator's labeller
honours a value someone set: false, paused-for-...), as label rules of the spec (Spec.label_rules), counted
by the plan's node lists, written, recorded and put back by apply's labeller (planner.apply.node_labels)."""

from __future__ import annotations

from typing import Any

from gpuplan.planner import pools
from gpuplan.planner.apply.journal import Recorder
from gpuplan.planner.apply.node_labels import NodeLabeller
from gpuplan.planner.observe.refresh import scheduled_nodes
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.model import StateFile

GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
DEPLOY = "nvidia.com/gpu.deploy.device-plugin"
PAUSED = "paused-for-driver-upgrade"
NODES = [
    ("joined", dict(GPU)),
    ("paused", {**GPU, DEPLOY: PAUSED}),
    ("off", {**GPU, DEPLOY: "false"}),
    ("cpu-only", {}),
]


def make_spec(body: str = "  daemonsets: {podTemplate: gpu-operator}\n") -> Spec:
    text = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: t}\nspec:\n" + body
    return parse_spec(text, filename="gpustack.yaml")


def deploy_work(spec: Spec, nodes: list[tuple[str, dict[str, str]]], written: Any = None) -> list[Any]:
    rules = spec.label_rules()
    members = pools.membership(spec.pool_selectors(), nodes)
    wanted = pools.wanted_labels(rules, members, nodes) if written is None else {}
    work = pools.label_work(wanted, members, nodes, written or {}, pools.if_absent_labels(rules))
    return [(w.value, dict(w.before)) for w in work if w.label == DEPLOY]


def test_each_operand_asks_for_its_deploy_label_where_absent_on_the_nodes_of_the_node_selector() -> None:
    spec = make_spec()
    [rule] = [rule for rule in spec.label_rules() if DEPLOY in rule.wanted.if_absent]
    assert (rule.pool, rule.component, dict(rule.wanted.selector)) == (None, "devicePlugin", GPU)
    assert not [rule for rule in make_spec("").label_rules() if rule.wanted.if_absent]  # gpuplan's shape
    daemonset = next(o for o in spec.desired_objects() if o.address.name == "nvidia-device-plugin-daemonset")
    annotations = daemonset.manifest["metadata"].get("annotations") or {}
    assert not [key for key in annotations if key.startswith("gpuplan.io/node")]


def test_only_a_node_without_a_value_is_labelled_and_a_rollback_leaves_a_value_set_since() -> None:
    spec = make_spec()
    assert deploy_work(spec, NODES) == [("true", {"joined": None})]
    assert deploy_work(spec, [("joined", {**GPU, DEPLOY: "true"}), *NODES[1:]]) == []  # labelled once
    # undoing (nothing wants them): gpuplan's value goes, the paused one it wrote before stays someone else's
    ours = {"joined": {DEPLOY: "true"}, "paused": {DEPLOY: "true"}}
    labelled = [("joined", {**GPU, DEPLOY: "true"}), *NODES[1:]]
    assert deploy_work(spec, labelled, written=ours) == [(None, {"joined": "true"})]


def test_the_plan_counts_the_nodes_apply_labels_before_the_gate() -> None:
    daemonset = next(
        dict(o.manifest)
        for o in make_spec().desired_objects()
        if o.address.name == "nvidia-device-plugin-daemonset"
    )
    nodes = [{"name": name, "labels": labels} for name, labels in NODES]
    assert scheduled_nodes(daemonset, nodes) == []
    assert scheduled_nodes(daemonset, nodes, {"joined": {DEPLOY: "true"}}) == ["joined"]


def test_apply_writes_records_and_puts_back_only_its_own_value() -> None:
    spec = make_spec()
    fake = FakeKubernetes(nodes=[{"metadata": {"name": name, "labels": labels}} for name, labels in NODES])
    recorder = Recorder(MemoryBackend(), StateFile.new())
    labeller = NodeLabeller(
        spec.label_rules(),
        pools.PlannedPools(tuple(spec.pool_selectors())),
        recorder,
        lambda _text, _component: None,
    )

    def label(name: str) -> str | None:
        live = fake.read(ObjectKey("v1", "Node", None, name))
        assert live is not None
        return live.labels.get(DEPLOY)

    written = labeller.before_gates(fake, "devicePlugin")
    assert [(item.label, item.nodes) for item in written] == [(DEPLOY, ["joined"])]
    assert [label(name) for name, _ in NODES] == ["true", PAUSED, "false", None]
    assert recorder.state.node_labels == {"joined": {DEPLOY: "true"}}
    fake.label_node("joined", {DEPLOY: PAUSED})  # k8s-driver-manager pauses the node's operands meanwhile
    assert labeller.restore(fake) == []
    assert label("joined") == PAUSED and recorder.state.node_labels == {}
