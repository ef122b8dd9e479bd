"""A node's GPU from NFD's NodeFeature before GFD has run: the PCI table, the precedence of GFD's labels, the
compatibility rules on NFD-identified nodes, and the cluster without NFD (on the in-memory fake)."""

from __future__ import annotations

from typing import Any

from gpuplan.modules import pci_ids
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec import compat
from gpuplan.planner.spec import model as spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import NODE_FEATURE
from gpuplan.views import plan_refusals
from tests.planner.conftest import make_node

V100_595 = (
    "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: t}\n"
    'spec:\n  driver: {version: "595.91.07"}\n'
)


def node_feature(node: str, *devices: tuple[str, str], namespace: str = "node-feature-discovery") -> Any:
    """The NodeFeature nfd-worker writes for ``node`` (fleet facts §1.2): (class, device) per PCI device,
    with a non-NVIDIA host bridge among them as on a real node."""
    elements = [{"attributes": {"class": "0600", "vendor": "8086", "device": "1237"}}] + [
        {"attributes": {"class": pci_class, "vendor": "10de", "device": device}}
        for pci_class, device in devices
    ]
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": node,
            "namespace": namespace,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {
            "features": {"instances": {"pci.device": {"elements": elements}}},
            "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"} if devices else {},
        },
    }


def facts_of(cluster: FakeKubernetes) -> dict[str, Any]:
    snapshot = cluster.refresh(stack="t", namespace="gpu-operator", kinds=())
    return {fact.name: fact for fact in refresh.node_facts(snapshot)}


def test_the_pci_table_names_every_model_of_fleet_facts_section_2() -> None:
    v100 = pci_ids.lookup("0x1DB5")
    assert v100 is not None and (v100.product, v100.family, v100.cc) == (
        "Tesla-V100-SXM2-32GB",
        "volta",
        (7, 0),
    )
    h200 = pci_ids.lookup("2335")
    assert h200 is not None and h200.mig_capable and h200.memory_mib == 143771
    assert pci_ids.lookup("1234") is None
    assert pci_ids.unknown_device("0x1234") == "NVIDIA device 0x1234, not in gpuplan's PCI table"


def test_a_node_gfd_has_not_labelled_is_identified_by_its_node_feature() -> None:
    cluster = FakeKubernetes(
        [node_feature("v100-0", *[("0302", "1db5")] * 8), node_feature("cpu-0")],
        nodes=[make_node("v100-0", gpu="v100", gfd=False), make_node("cpu-0", gpu=None)],
    )
    found = facts_of(cluster)
    v100 = found["v100-0"]
    assert (v100.gpu_source, v100.gpu_product, v100.gpu_family, v100.cc) == (
        "nfd",
        "Tesla-V100-SXM2-32GB",
        "volta",
        (7, 0),
    )
    assert (v100.gpu_count, v100.mig_capable, v100.mig_enabled, v100.pci_device) == (8, False, None, "0x1db5")
    cpu = found["cpu-0"]
    assert not cpu.has_nvidia_gpu and cpu.gpu_source is None and cpu.unidentified is None


def test_gfd_labels_win_over_the_node_feature() -> None:
    """GFD reads NVML on the node: its product (a MIG product, say) is more specific than the PCI id."""
    mig = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    cluster = FakeKubernetes(
        [node_feature("a100-0", ("0302", "20b2"))], nodes=[make_node("a100-0", labels=mig)]
    )
    a100 = facts_of(cluster)["a100-0"]
    assert (a100.gpu_source, a100.gpu_product, a100.mig_enabled) == (
        "gfd-label",
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        True,
    )
    assert a100.pci_device == "0x20b2"


def test_nvswitches_are_not_counted_as_gpus() -> None:
    cluster = FakeKubernetes(
        [node_feature("h100-0", *[("0302", "2330")] * 8, *[("0680", "22a3")] * 4)],
        nodes=[make_node("h100-0", gpu="h100-80gb", gfd=False)],
    )
    assert facts_of(cluster)["h100-0"].gpu_count == 8


def test_driver_595_on_an_nfd_identified_v100_is_an_error_naming_node_and_gpu() -> None:
    cluster = FakeKubernetes(
        [node_feature("v100-0", ("0302", "1db5"))], nodes=[make_node("v100-0", gpu="v100", gfd=False)]
    )
    findings = compat.check_nodes(
        spec.parse_spec(V100_595, filename="gpustack.yaml"), list(facts_of(cluster).values())
    )
    errors = compat.blocking(findings)
    assert [(f.node, f.component) for f in errors] == [("v100-0", "driver")]
    assert "Tesla-V100-SXM2-32GB (volta)" in errors[0].message and "R580" in errors[0].message
    assert "580" in errors[0].hint


def test_an_unknown_device_id_is_a_warning_naming_it() -> None:
    cluster = FakeKubernetes(
        [node_feature("odd-0", ("0302", "1234"))], nodes=[make_node("odd-0", gpu="v100", gfd=False)]
    )
    fact = facts_of(cluster)["odd-0"]
    assert fact.has_nvidia_gpu and not fact.gpu_known and fact.pci_device == "0x1234"
    findings = compat.check_nodes(spec.parse_spec(V100_595, filename="gpustack.yaml"), [fact])
    assert [(f.severity, f.node, f.message) for f in findings] == [
        (
            "warning",
            "odd-0",
            "NVIDIA device 0x1234, not in gpuplan's PCI table: driver, MIG and sharing compatibility "
            "not checked on this node",
        )
    ]


def test_a_node_nfd_has_not_described_is_a_warning_even_without_its_pci_label() -> None:
    """NFD runs (another node has a NodeFeature) but not on this node: no label says it has a GPU, so
    nothing can say whether the rules apply."""
    bare = make_node("dark-0", gpu=None)
    cluster = FakeKubernetes([node_feature("cpu-0")], nodes=[bare, make_node("cpu-0", gpu=None)])
    findings = compat.check_nodes(
        spec.parse_spec(V100_595, filename="gpustack.yaml"), list(facts_of(cluster).values())
    )
    assert [(f.severity, f.node) for f in findings] == [("warning", "dark-0")]
    assert "no NodeFeature from NFD" in findings[0].message
    assert "driver, MIG and sharing compatibility not checked" in findings[0].message
    assert "run NFD there" in findings[0].hint


def test_without_nfd_crd_the_facts_are_the_labels_alone() -> None:
    cluster = FakeKubernetes(nodes=[make_node("v100-0", gpu="v100", gfd=False), make_node("cpu-0", gpu=None)])
    snapshot = cluster.refresh(stack="t", namespace="gpu-operator", kinds=())
    assert snapshot.node_features.status == "not-served"
    found = {fact.name: fact for fact in refresh.node_facts(snapshot)}
    assert found["v100-0"].unidentified == "GPU model unknown until GFD runs"
    assert found["cpu-0"].unidentified is None


def test_forbidden_node_features_are_recorded_not_raised() -> None:
    cluster = FakeKubernetes(nodes=[make_node("v100-0", gpu="v100", gfd=False)], served=[NODE_FEATURE])
    cluster.node_features_forbidden = True
    snapshot = cluster.refresh(stack="t", namespace="gpu-operator", kinds=())
    assert snapshot.node_features.status == "forbidden" and snapshot.requests == 1


def test_a_plan_warns_when_node_features_are_forbidden() -> None:
    cluster = FakeKubernetes(nodes=[make_node("v100-0", gpu="v100", gfd=False)], served=[NODE_FEATURE])
    cluster.node_features_forbidden = True
    stack = spec.parse_spec(V100_595, filename="gpustack.yaml")
    document = make_plan(stack, None, refresh.refresh(cluster, stack, None)).document()
    assert document["nfd_node_features"] == "forbidden"
    [warning] = [f for f in document["findings"] if "NodeFeatures could not be read" in f["message"]]
    assert warning["severity"] == "warning" and "nodefeatures.nfd.k8s-sigs.io" in warning["hint"]


def test_a_plan_refuses_a_driver_several_nfd_identified_gpus_cannot_run() -> None:
    nodes = [make_node(f"v100-{i}", gpu="v100", gfd=False) for i in range(7)]
    cluster = FakeKubernetes([node_feature(f"v100-{i}", ("0302", "1db5")) for i in range(7)], nodes=nodes)
    stack = spec.parse_spec(V100_595, filename="gpustack.yaml")
    document = make_plan(stack, None, refresh.refresh(cluster, stack, None)).document()
    assert document["applicable"] is False
    [refusal] = plan_refusals.refusals(document)  # one rule broken on seven nodes: one Error: line
    assert refusal.summary.startswith("driver 595.91.07 does not support Tesla-V100-SXM2-32GB (volta)")
    assert "7 nodes" in str(refusal.where) and "v100-0" in str(refusal.where)
    assert "580" in refusal.hint


def test_an_external_gfd_is_not_verified_by_what_nfd_identified() -> None:
    cluster = FakeKubernetes(
        [node_feature("v100-0", ("0302", "1db5"))], nodes=[make_node("v100-0", gpu="v100", gfd=False)]
    )
    facts = list(facts_of(cluster).values())
    check = refresh.verify_external("gfd", None, facts, ())
    assert check.verdict == "mismatch" and check.problem_nodes == ("v100-0",)
