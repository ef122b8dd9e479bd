"""planner.observe.driver_versions: the driver versions of GPU nodes GFD has not labelled, from NVML when
gpuplan runs on the node and from the DCGM exporters' DCGM_FI_DRIVER_VERSION label (capped, with a note), and
how the plan's driver status names the source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lab_stack import LAB_HEADER

from gpuplan.planner.observe import driver_versions as host_driver
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.fake_nvml import FakeGpu, FakeNvml
from gpuplan.providers.host import HostIdentity
from gpuplan.providers.nvml import read_local_host

SPEC = parse_spec(LAB_HEADER, filename="gpustack.yaml")
EXPORTER = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
    "spec": {
        "selector": {"matchLabels": {"app": "dcgm-exporter"}},
        "template": {
            "metadata": {"labels": {"app": "dcgm-exporter"}},
            "spec": {
                "containers": [
                    {"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.0-4.6.0-ubuntu22.04"}
                ]
            },
        },
    },
}
METRICS = (
    '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",'
    'DCGM_FI_DRIVER_VERSION="{version}"} 40\n'
)
GPU = FakeGpu(name="NVIDIA A100-SXM4-80GB", memory_mib=81920, compute_capability=(8, 0), mig_capable=True)


def gpu_node(name: str, *, machine_id: str = "") -> dict[str, Any]:
    """A GPU node NFD has labelled but GFD has not (no driver label)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
        "status": {"nodeInfo": {"machineID": machine_id, "systemUUID": f"uuid-{name}"}},
    }


def exporter_pod(node: str, *, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": f"dcgm-exporter-{node}", "namespace": "monitoring"},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class Cluster(FakeKubernetes):  # type: ignore[misc]  # Any to mypy under the editable install only
    """The fake cluster with the pods list the plan reads exporters from (one request per list)."""

    def __init__(
        self, objects: list[dict[str, Any]], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> None:
        super().__init__(objects, nodes=nodes)
        self.pods = pods
        self.selectors: list[str | None] = []

    def list_reduced(
        self,
        api_version: str,
        kind: str,
        reduce: Callable[[dict[str, Any]], Any],
        *,
        label_selector: str | None = None,
    ) -> list[Any]:
        self.request_count += 1
        self.selectors.append(label_selector)
        return [reduce(pod) for pod in self.pods]


class Exporters:
    """The pod proxy: each node's exporter reports the version in ``versions``."""

    def __init__(self, versions: dict[str, str]) -> None:
        self.versions, self.request_count = versions, 0
        self.scraped: list[str] = []

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self.request_count += 1
        node = pod.removeprefix("dcgm-exporter-")
        self.scraped.append(node)
        return METRICS.replace("{version}", self.versions[node]).encode()

    def close(self) -> None:
        pass


def no_nvml() -> Any:
    raise AssertionError("NVML is read only when this host is a node of the cluster")


def test_the_node_that_is_this_host_by_name_machine_id_or_system_uuid() -> None:
    nodes = [
        {"name": "gpu-a.example.com", "nodeInfo": {}},
        {"name": "gpu-b", "nodeInfo": {"machineID": "m-b"}},
        {"name": "gpu-c", "nodeInfo": {"systemUUID": "ABC-C"}},
    ]
    assert host_driver.this_host_node(nodes, HostIdentity("GPU-A.example.com")) == "gpu-a.example.com"
    assert host_driver.this_host_node(nodes, HostIdentity("laptop", machine_id="m-b")) == "gpu-b"
    assert host_driver.this_host_node(nodes, HostIdentity("laptop", system_uuid="abc-c")) == "gpu-c"
    assert host_driver.this_host_node(nodes, HostIdentity("laptop", machine_id="other")) is None


def test_nvml_gives_this_hosts_node_its_driver_and_the_status_says_so() -> None:
    cluster = Cluster([], [gpu_node("gpu-a", machine_id="m-a")], [])
    snapshot = refresh.refresh(cluster, SPEC, None)
    reports = host_driver.gather(
        cluster,
        snapshot,
        SPEC,
        open_reader=lambda: Exporters({}),
        identity=HostIdentity("laptop", machine_id="m-a"),
        read_nvml=lambda: read_local_host(FakeNvml([GPU], driver_version="580.105.08")),
    )
    assert reports.versions == {"gpu-a": ("580.105.08", "nvml")} and reports.requests == 0
    driver = make_plan(SPEC, None, snapshot, driver_reports=reports).components["driver"]
    assert (driver.status, driver.detail) == (
        "verified",
        "verified 580.105.08 on 1/1 nodes (NVML on this host)",
    )

    without = host_driver.gather(
        cluster,
        snapshot,
        SPEC,
        open_reader=lambda: Exporters({}),
        identity=HostIdentity("gpu-a"),
        read_nvml=lambda: read_local_host(FakeNvml.without_library()),
    )
    assert without.versions == {}, "no driver here: not a source, and no error"


def test_dcgm_exporters_report_the_driver_of_nodes_without_gfd_and_a_mismatch_is_found() -> None:
    nodes = [gpu_node("gpu-a"), gpu_node("gpu-b"), gpu_node("gpu-c")]
    cluster = Cluster(
        [EXPORTER], nodes, [exporter_pod("gpu-a"), exporter_pod("gpu-b"), exporter_pod("gpu-c", ready=False)]
    )
    snapshot = refresh.refresh(cluster, SPEC, None)
    proxy = Exporters({"gpu-a": "580.105.08", "gpu-b": "575.57.08"})
    reports = host_driver.gather(
        cluster, snapshot, SPEC, open_reader=lambda: proxy, identity=HostIdentity("laptop"), read_nvml=no_nvml
    )
    assert cluster.selectors == ["app=dcgm-exporter"], "the foreign exporter's pods, by its selector"
    assert reports.versions == {"gpu-a": ("580.105.08", "dcgm"), "gpu-b": ("575.57.08", "dcgm")}
    assert reports.requests == 1 + 2, "one pods list, one scrape per Ready exporter"
    plan = make_plan(SPEC, None, snapshot, driver_reports=reports)
    driver = plan.components["driver"]
    assert driver.status == "mismatch" and driver.problem_nodes == ("gpu-b", "gpu-c")
    assert driver.detail.startswith(
        "verified 580.105.08 on 1/3 nodes (DCGM exporter); mismatch on node gpu-b"
    )
    assert plan.api_requests == snapshot.requests + reports.requests


def test_scrapes_are_capped_with_a_note_so_requests_do_not_grow_with_nodes() -> None:
    names = [f"gpu-{index:03d}" for index in range(30)]
    cluster = Cluster([EXPORTER], [gpu_node(name) for name in names], [exporter_pod(name) for name in names])
    snapshot = refresh.refresh(cluster, SPEC, None)
    proxy = Exporters(dict.fromkeys(names, "580.105.08"))
    reports = host_driver.gather(
        cluster,
        snapshot,
        SPEC,
        open_reader=lambda: proxy,
        max_scrapes=5,
        identity=HostIdentity("laptop"),
        read_nvml=no_nvml,
    )
    assert sorted(proxy.scraped) == names[:5] and reports.requests == 1 + 5
    [note] = reports.notes
    assert note.startswith("driver version read from the DCGM exporter on 5 of 30 nodes")
    plan = make_plan(SPEC, None, snapshot, driver_reports=reports)
    assert note in [f.message for f in plan.findings if f.component == "driver"]
    assert plan.components["driver"].detail.startswith("verified 580.105.08 on 5/30 nodes (DCGM exporter)")


def test_nothing_is_read_when_gfd_reported_every_node_or_the_driver_is_not_external() -> None:
    labelled = gpu_node("gpu-a")
    labelled["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] = "580.105.08"
    cluster = Cluster([EXPORTER], [labelled], [exporter_pod("gpu-a")])
    snapshot = refresh.refresh(cluster, SPEC, None)
    reports = host_driver.gather(
        cluster,
        snapshot,
        SPEC,
        open_reader=lambda: Exporters({}),
        identity=HostIdentity("gpu-a"),
        read_nvml=no_nvml,
    )
    assert reports == host_driver.DriverReports() and cluster.selectors == []
    owned = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec: {}\n",
        filename="gpustack.yaml",
    )
    bare = Cluster([EXPORTER], [gpu_node("gpu-a")], [exporter_pod("gpu-a")])
    assert (
        host_driver.gather(
            bare,
            refresh.refresh(bare, owned, None),
            owned,
            open_reader=lambda: Exporters({}),
            identity=HostIdentity("gpu-a"),
            read_nvml=no_nvml,
        )
        == host_driver.DriverReports()
    )
