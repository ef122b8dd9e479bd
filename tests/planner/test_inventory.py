"""The inventory model: a row per node from NodeFacts (GPU, driver and its source, components present),
totals per family and model, unknown-until-GFD nodes counted apart, one refresh with no managed kinds, and the
local host's document from NVML values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.observe import inventory
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.fake_nvml import FakeGpu, FakeNvml
from gpuplan.providers.nvml import read_local_host
from gpuplan.providers.protocols import PromSample
from gpuplan.sim.catalog import CATALOG

NodeFactory = Callable[..., dict[str, Any]]  # the gpu_node fixture of conftest.py
MEMORY = "nvidia.com/gpu.memory"


def facts(node: dict[str, Any]) -> NodeFacts:
    return NodeFacts.from_node(node)


def test_row_of_a_gfd_labelled_node(gpu_node: NodeFactory) -> None:
    node = gpu_node(
        "h100-a",
        gpu="h100-80gb",
        driver="580.105.08",
        count=8,
        allocatable="8",
        labels={MEMORY: "81559", "nvidia.com/gfd.timestamp": "1795975260"},
    )
    row = inventory.NodeRow.of(facts(node))
    assert (row.name, row.has_gpu, row.product, row.family) == (
        "h100-a",
        True,
        "NVIDIA-H100-80GB-HBM3",
        "hopper",
    )
    assert (row.count, row.memory_mib, row.cc, row.mig_capable, row.mig_enabled) == (
        8,
        81559,
        (9, 0),
        True,
        False,
    )
    assert (row.driver_version, row.driver_source) == ("580.105.08", "gfd-label")
    assert (row.toolkit, row.allocatable_gpus, row.gfd) == (True, 8, True)
    assert row.gpu_models() == {("hopper", "NVIDIA-H100-80GB-HBM3"): 8}


def test_row_before_gfd_runs_knows_only_that_there_is_a_gpu(gpu_node: NodeFactory) -> None:
    row = inventory.NodeRow.of(facts(gpu_node("lab-node", gpu="rtx-3060", gfd=False, handlers=("runc",))))
    assert row.has_gpu and row.product is None and row.gpu_models() is None
    assert (row.family, row.count, row.memory_mib, row.cc, row.mig_capable) == (None, None, None, None, None)
    assert (row.driver_version, row.driver_source) == (None, None)
    assert (row.toolkit, row.allocatable_gpus, row.gfd) == (False, None, False)
    document = row.document()
    assert document["gpu"]["present"] is True and document["driver"] == {"version": None, "source": None}
    # The exporter and validator come from the stack's pods, which a row built from node facts alone has not
    # read: unknown (None), not absent.
    assert document["components"] == {
        "toolkit": False,
        "device_plugin": False,
        "gfd": False,
        "dcgm_exporter": None,
        "validator": None,
    }


def test_components_are_read_from_their_effects(gpu_node: NodeFactory) -> None:
    """Toolkit: the nvidia runtime handler; device plugin: allocatable nvidia.com/gpu (0 is none); GFD:
    labels."""
    plugin_only = inventory.NodeRow.of(
        facts(gpu_node(gfd=False, allocatable="4", handlers=("runc", "nvidia")))
    )
    assert (plugin_only.toolkit, plugin_only.allocatable_gpus, plugin_only.gfd) == (True, 4, False)
    zero = inventory.NodeRow.of(facts(gpu_node(allocatable="0")))
    assert zero.allocatable_gpus is None and zero.document()["components"]["device_plugin"] is False


def test_driver_from_labels_before_gfd_runs(gpu_node: NodeFactory) -> None:
    """A driver version label put on the node by hand (or by an older GFD) is shown, with its source."""
    node = gpu_node(gfd=False, labels={"nvidia.com/cuda.driver-version.full": "570.195.03"})
    row = inventory.NodeRow.of(facts(node))
    assert (row.product, row.driver_version, row.driver_source) == (None, "570.195.03", "gfd-label")


def test_totals_per_family_and_model(gpu_node: NodeFactory) -> None:
    nodes = [
        gpu_node("a100", gpu="a100-80gb", count=8),
        gpu_node("rtx", gpu="rtx-3060", count=1),
        gpu_node("a100-b", gpu="a100-80gb", count=4),
        gpu_node("h100", gpu="h100-80gb", count=8),
        gpu_node("l40s", gpu="l40s", count=4),
        gpu_node("new", gpu="b200", gfd=False),
        gpu_node("cpu", gpu=None),
    ]
    summary = inventory.cluster_inventory(map(facts, nodes)).summary
    assert (summary.nodes, summary.gpu_nodes, summary.gpus, summary.unidentified_gpu_nodes) == (7, 6, 25, 1)
    assert [(f.family, f.gpus, f.nodes) for f in summary.families] == [
        ("ampere", 13, 3),
        ("hopper", 8, 1),
        ("ada-lovelace", 4, 1),
    ]
    assert [(m.product, m.gpus, m.nodes) for m in summary.families[0].models] == [
        ("NVIDIA-A100-SXM4-80GB", 12, 2),
        ("NVIDIA-GeForce-RTX-3060", 1, 1),
    ]


def test_equal_counts_order_by_name(gpu_node: NodeFactory) -> None:
    nodes = [gpu_node("t", gpu="t4", count=2), gpu_node("v", gpu="v100", count=2)]
    assert [f.family for f in inventory.cluster_inventory(map(facts, nodes)).summary.families] == [
        "turing",
        "volta",
    ]


def test_many_nodes_are_counted_in_one_pass(gpu_node: NodeFactory) -> None:
    models = ("a100-80gb", "h100-80gb", "l40s", "t4")
    nodes = (facts(gpu_node(f"n{i}", gpu=models[i % 4], count=8)) for i in range(2000))
    result = inventory.cluster_inventory(nodes)
    assert len(result.nodes) == 2000 and result.summary.gpus == 16000
    assert {f.family: f.nodes for f in result.summary.families} == {
        "ampere": 500,
        "hopper": 500,
        "ada-lovelace": 500,
        "turing": 500,
    }


def test_read_cluster_refreshes_no_managed_kinds(gpu_node: NodeFactory) -> None:
    cluster = FakeKubernetes(
        nodes=[gpu_node("b", gpu="l40s"), gpu_node("a", gpu="t4", gfd=False)], server_version="v1.37.1"
    )
    result = inventory.read_cluster(cluster, stack="lab", namespace="gpu-ops")
    assert cluster.calls == [("refresh", {"stack": "lab", "namespace": "gpu-ops", "kinds": ()})]
    assert [row.name for row in result.nodes] == ["a", "b"] and result.requests == 1
    document = result.document()
    assert document["format_version"] == "1" and document["source"] == "cluster"
    assert document["cluster"] == {"server_version": "v1.37.1", "stack": "lab", "namespace": "gpu-ops"}
    assert [node["name"] for node in document["nodes"]] == ["a", "b"]
    assert document["summary"]["unidentified_gpu_nodes"] == 1


def test_read_cluster_without_a_spec_names_no_stack(gpu_node: NodeFactory) -> None:
    result = inventory.read_cluster(FakeKubernetes(nodes=[gpu_node()]))
    assert result.document()["cluster"] == {"server_version": "v1.34.1"}


def test_local_inventory_counts_this_host_as_one_node() -> None:
    a100, rtx = CATALOG["a100-80gb"], CATALOG["rtx-3060"]
    gpus = [FakeGpu(a100.name, a100.memory_mib, (8, 0), True, uuid=f"GPU-{i}") for i in range(2)]
    gpus.append(
        FakeGpu(rtx.name, rtx.memory_mib, (8, 6), False, uuid="GPU-2", unsupported=frozenset({"power_usage"}))
    )
    local = inventory.local_inventory(read_local_host(FakeNvml(gpus, cuda_driver_version=12080)))
    summary = local.summary
    assert (summary.nodes, summary.gpu_nodes, summary.gpus) == (1, 1, 3)
    assert [(f.family, f.gpus, f.nodes) for f in summary.families] == [("ampere", 3, 1)]
    assert [(m.product, m.gpus) for m in summary.families[0].models] == [(a100.name, 2), (rtx.name, 1)]
    document = local.document()
    assert (document["format_version"], document["source"]) == ("1", "nvml")
    assert document["host"]["cuda_driver_version"] == "12.8"
    first, _, last = document["host"]["gpus"]
    assert first["mig"] == {"capable": True, "current": "disabled", "pending": "disabled"}
    assert last["mig"] == {"capable": False, "current": None, "pending": None}
    assert last["power"]["usage_w"] is None and last["family"] == "ampere"
    assert first["memory"] == {"total_mib": a100.memory_mib, "used_mib": 0}


def test_local_host_without_gpus() -> None:
    summary = inventory.local_inventory(read_local_host(FakeNvml([]))).summary
    assert (summary.nodes, summary.gpu_nodes, summary.gpus, summary.families) == (1, 0, 0, ())


def test_a_prometheus_server_fills_in_the_driver_gfd_has_not_labelled(gpu_node: NodeFactory) -> None:
    from .test_drift_prometheus import FakePrometheus

    class CountedDown(FakePrometheus):
        """Answers the inventory's ``count by`` query with a series per node and driver."""

        def query(self, promql: str) -> list[PromSample]:
            return super().query(promql) if promql.startswith("time()") else self.answer(promql)

        def answer(self, promql: str) -> list[PromSample]:
            self.request_count += 1
            self.queries.append(promql)
            return self.samples

    driver = "DCGM_FI_DRIVER_VERSION"
    cluster = FakeKubernetes(
        nodes=[gpu_node("b", gpu="l40s", driver="580.65.06"), gpu_node("a", gpu="t4", gfd=False)]
    )
    server = CountedDown(
        [
            PromSample({"Hostname": "a", driver: "580.105.08"}, 1),
            PromSample({"node": "b", driver: "570.195.03"}, 8),
        ]
    )
    rows = {row.name: row for row in inventory.read_cluster(cluster, querier=server).nodes}
    assert (rows["a"].driver_version, rows["a"].driver_source) == ("580.105.08", "dcgm")
    assert (rows["b"].driver_version, rows["b"].driver_source) == ("580.65.06", "gfd-label")
    assert server.queries[-1] == f"count by (node, Hostname, hostname, {driver}) (DCGM_FI_DEV_GPU_TEMP)"
    assert server.request_count == 2


def test_row_of_mig_nodes_counts_their_mig_devices(gpu_node: NodeFactory) -> None:
    mixed = gpu_node("mixed", gpu="a100-80gb", count=8)
    mixed["status"]["allocatable"] = {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}
    row = inventory.NodeRow.of(facts(mixed)).document()
    assert row["components"]["device_plugin"] is True and row["allocatable_gpus"] is None
    assert [(d["profile"], d["resource"], d["count"]) for d in row["mig_devices"]] == [
        ("1g.10gb", "nvidia.com/mig-1g.10gb", 14),
        ("3g.40gb", "nvidia.com/mig-3g.40gb", 4),
    ]
    single = gpu_node("single", gpu="a100-80gb", count=56, allocatable="56")
    single["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    row = inventory.NodeRow.of(facts(single)).document()
    assert row["mig_devices"] == [{"profile": "1g.10gb", "resource": "nvidia.com/gpu", "count": 56}]


def test_row_of_a_time_sliced_node_shows_its_shared_capacity(gpu_node: NodeFactory) -> None:
    sliced = gpu_node("sliced", gpu="a100-80gb", count=2, allocatable="8")
    sliced["metadata"]["labels"].update(
        {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    )
    row = inventory.NodeRow.of(facts(sliced)).document()
    assert row["sharing"] == {"strategy": "time-slicing", "replicas": 4, "shared_gpus": 8}
    plain = gpu_node("plain", gpu="a100-80gb", count=2, allocatable="2")
    plain["metadata"]["labels"].update(
        {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}
    )
    assert inventory.NodeRow.of(facts(plain)).document()["sharing"] is None
