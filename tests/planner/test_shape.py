"""The cluster's shape without a server: GPU models read back from GFD and NFD labels, nodes folded only
where their names are what the simulator expands, a 5,000-node fleet streamed into a compact scenario
(one shape object per pool, whatever the node count), and manifests stripped of server-set fields."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.planner.observe import shape
from gpuplan.providers.snapshot import LiveObject, ObjectKey, PciDevice
from gpuplan.sim import nodes as sim_nodes
from gpuplan.sim import scenario as scenario_mod
from gpuplan.views import scenario_file

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class StreamingStub:
    """Lists as a paginated server would: each item made and reduced one at a time, never all held."""

    def __init__(self, items: dict[str, Callable[[], Iterator[dict[str, Any]]]]) -> None:
        self.items = items
        self.request_count = 0

    def list_reduced(
        self, api_version: str, kind: str, reduce: Callable[[dict[str, Any]], Any], **_: Any
    ) -> list[Any]:
        self.request_count += 1
        return [reduce(item) for item in self.items.get(kind, lambda: iter(()))()]

    def read(self, key: ObjectKey) -> LiveObject | None:
        self.request_count += 1
        return None


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "h100-80gb"),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}, "a100-80gb"),
        ({"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, "t4"),
        ({"feature.node.kubernetes.io/pci-0302_10de_2330.present": "true"}, "h100-80gb"),
        ({"feature.node.kubernetes.io/pci-10de_2335.present": "true"}, "h200"),
        ({"feature.node.kubernetes.io/pci-10de.present": "true"}, None),
        ({"nvidia.com/gpu.product": "NVIDIA-A10G"}, None),
    ],
)
def test_gpu_model_from_gfd_product_or_nfd_device(labels: dict[str, str], expected: str | None) -> None:
    assert shape.gpu_model_of(labels) == expected


def test_names_fold_only_into_what_the_simulator_expands() -> None:
    alike = shape.node_shape({"metadata": {"name": "x"}}, driver_containers=False, toolkit_containers=False)
    groups = shape.fold(
        [(f"gpu-{n:02d}", alike) for n in range(1, 13)] + [("odd-7", alike), ("gpu-x", alike)]
    )
    assert [(g.prefix, g.count, g.name) for g in groups] == [
        ("gpu-", 12, None),
        (None, 1, "odd-7"),
        (None, 1, "gpu-x"),
    ]
    gappy = shape.fold([("n-1", alike), ("n-3", alike)])
    assert [g.name for g in gappy] == ["n-1", "n-3"], "a gap would rename nodes on restart"


def test_a_5000_node_fleet_streams_into_a_compact_scenario() -> None:
    fleet = scenario_mod.fleet_scenario(5000)

    def node_pages() -> Iterator[dict[str, Any]]:
        for node in scenario_mod.expand_nodes(fleet):
            obj = sim_nodes.node_object(node, now=NOW)
            model = node.gpu
            assert model is not None
            obj["metadata"]["labels"] |= {
                "nvidia.com/gpu.product": model.product,
                "nvidia.com/gpu.count": str(node.gpu_count),
                "nvidia.com/cuda.driver-version.full": "580.105.08",
                "nvidia.com/gfd.timestamp": str(node.ordinal),  # moves on per node: never folded on
            }
            yield obj

    stub = StreamingStub({"Node": node_pages})
    found = shape.read_shape(stub)  # type: ignore[arg-type]
    assert found.node_count == 5000 and len(found.groups) == len(fleet.nodes)
    text = scenario_file.render(found)
    assert len(text.splitlines()) < 60 * len(fleet.nodes), "a compact file: a few lines per pool"
    parsed = scenario_mod.parse_scenario(text)
    assert sorted((n.namePrefix, n.count, n.gpu and n.gpu.model) for n in parsed.nodes) == sorted(
        (n.namePrefix, n.count, n.gpu and n.gpu.model) for n in fleet.nodes
    )
    assert stub.request_count == 7, (
        "one list per kind, NodeFeatures included (no Helm release: no Secret list); no read per node"
    )


def test_nodefeature_names_the_model_before_gfd_and_no_nfd_is_said() -> None:
    node = {"metadata": {"name": "n", "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}}}
    h100 = PciDevice("0302", "2330")
    found = shape.node_shape(node, driver_containers=False, toolkit_containers=False, pci=(h100,) * 8)
    assert (found.gpu_model, found.gpu_count, found.note, found.nfd) == ("h100-80gb", 8, None, True)
    switch = PciDevice("0680", "22a3")  # an HGX board's NVSwitch is no GPU
    found = shape.node_shape(node, driver_containers=False, toolkit_containers=False, pci=(h100, switch))
    assert (found.gpu_model, found.gpu_count) == ("h100-80gb", 1)
    unknown = shape.node_shape(
        node, driver_containers=False, toolkit_containers=False, pci=(PciDevice("0302", "20b5"),)
    )
    assert unknown.gpu_model is None and unknown.note and "10de:20b5" in unknown.note
    bare = shape.node_shape({"metadata": {"name": "m"}}, driver_containers=False, toolkit_containers=False)
    assert bare.nfd is False and "nfd: false" in scenario_file.render(
        shape.ClusterShape(groups=(shape.NodeGroup(bare, name="m"),), objects=(), node_count=1, requests=0)
    )


def test_strip_keeps_a_manifest_and_drops_what_the_server_set() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": "sh.helm.release.v1.x.v1",
            "uid": "u",
            "resourceVersion": "7",
            "managedFields": [{}],
            "creationTimestamp": "t",
            "ownerReferences": [{"uid": "o"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
            "labels": {"owner": "helm"},
        },
        "data": {"release": "c2VjcmV0"},
        "status": {},
    }
    assert shape.strip(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sh.helm.release.v1.x.v1", "labels": {"owner": "helm"}},
        "type": "helm.sh/release.v1",
    }
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert shape.strip(config_map) == config_map


def test_labels_the_simulator_derives_are_left_out_and_the_rest_kept() -> None:
    node = {
        "metadata": {
            "name": "arm-1",
            "labels": {
                "kubernetes.io/hostname": "arm-1",
                "kubernetes.io/arch": "arm64",
                "kubernetes.io/os": "linux",
                "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1-generic",
                "nvidia.com/gfd.timestamp": "1",
                "pool": "inference",
            },
        }
    }
    found = shape.node_shape(node, driver_containers=False, toolkit_containers=False)
    assert dict(found.labels) == {"kubernetes.io/arch": "arm64", "pool": "inference"}
    assert found.kernel == "6.8.0-1-generic"


def test_a_driver_or_toolkit_container_is_not_the_hosts() -> None:
    gfd = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/cuda.driver-version.full": "580.105.08"}
    node = {
        "metadata": {"name": "n", "labels": gfd},
        "status": {"runtimeHandlers": [{"name": ""}, {"name": "nvidia"}, {"name": "runc"}]},
    }
    host = shape.node_shape(node, driver_containers=False, toolkit_containers=False)
    assert (host.driver, host.toolkit) == ("580.105.08", True)
    operands = shape.node_shape(node, driver_containers=True, toolkit_containers=True)
    assert (operands.driver, operands.toolkit) == (None, False), "the restarted operands bring them again"
    node["metadata"]["labels"] = {**gfd, "nvidia.com/gpu.deploy.driver": "pre-installed"}  # type: ignore[index]
    assert shape.node_shape(node, driver_containers=True, toolkit_containers=True).driver == "580.105.08"
