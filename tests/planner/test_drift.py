"""planner.drift.report.build_report on a FakeKubernetes cluster: every finding kind, the matrix cells,
coverage.

The stack is "applied" into the fake (objects put as a server stores them, records made from what it
returned), pods are written as the DaemonSet controller and kubelet would leave them, and DCGM scrapes are
Prometheus text as the exporter writes it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from lab_stack import LAB_HEADER

from gpuplan.planner.drift import report as drift
from gpuplan.planner.drift.pods import pod_facts
from gpuplan.planner.health.gates import Scrape, current_pods, node_of, pod_failure, pod_name, pod_ready
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.observe.telemetry import Thresholds
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import StateFile

from .conftest import make_node

SPEC = LAB_HEADER
PLUGIN = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
MANAGED = ("devicePlugin", "gfd", "dcgmExporter", "validator")


NOW = 1_800_000_000.0


def gpu_node(name: str, *, driver: str = "580.105.08", count: int = 2, **kwargs: Any) -> dict[str, Any]:
    node: dict[str, Any] = make_node(
        name, gpu="a100-80gb", driver=driver, count=count, allocatable=str(count), **kwargs
    )
    node["metadata"]["labels"].update(
        {"nvidia.com/gpu.memory": "81920", "nvidia.com/cuda.driver-version.major": driver.split(".")[0]}
    )
    return node


def scrape_text(
    node: str,
    gpus: int,
    *,
    temperature: float = 40,
    util: float = 10,
    xid: int = 0,
    driver: str = "580.105.08",
) -> str:
    """The exporter's text for ``gpus`` GPUs; GPU 0 reads the given values, the others are cool and idle."""
    lines = []
    for metric, value, calm in (
        ("DCGM_FI_DEV_GPU_TEMP", temperature, 40),
        ("DCGM_FI_DEV_GPU_UTIL", util, 10),
        ("DCGM_FI_DEV_XID_ERRORS", xid, 0),
    ):
        lines += [f"# HELP {metric} {metric}.", f"# TYPE {metric} gauge"]
        lines += [
            f'{metric}{{gpu="{i}",UUID="GPU-{node}-{i}",modelName="NVIDIA A100-SXM4-80GB",hostname="{node}",'
            f'DCGM_FI_DRIVER_VERSION="{driver}"}} {value if i == 0 else calm}'
            for i in range(gpus)
        ]
    return "\n".join(lines) + "\n"


class Lab:
    """A fake cluster with the spec's objects applied and recorded, and Ready pods on every node."""

    def __init__(self, nodes: list[dict[str, Any]], spec_text: str = SPEC) -> None:
        self.spec: Spec = parse_spec(spec_text, filename="gpustack.yaml")
        self.cluster = FakeKubernetes(nodes=nodes)
        self.nodes = [
            n["metadata"]["name"]
            for n in nodes
            if "feature.node.kubernetes.io/pci-10de.present" in n["metadata"]["labels"]
        ]
        self.stack = self.spec.context()
        records = []
        for obj in self.spec.desired_objects(self.stack):
            records.append(adopt.record_applied(obj, self.cluster.put(obj.manifest), serial=1))
        self.state = StateFile.new().with_records(records).next_serial()
        self.pods: list[dict[str, Any]] = [
            self.pod(component, node)
            for component in MANAGED
            for node in self.nodes
            if self.spec.components()[component].owner == "gpuplan"
        ]
        self.scrapes = {
            node: Scrape(f"nvidia-dcgm-exporter-{node}", text=scrape_text(node, 2)) for node in self.nodes
        }

    def daemonset(self, component: str) -> Mapping[str, Any]:
        return next(
            obj.manifest
            for obj in self.cluster.refresh(
                stack="lab", namespace="gpu-operator", kinds=[("apps/v1", "DaemonSet")]
            ).managed.values()
            if obj.labels.get("gpuplan.io/component") == component
        )

    def pod(
        self, component: str, node: str, *, ready: bool = True, waiting: str | None = None
    ) -> dict[str, Any]:
        ds = self.daemonset(component)
        template = ds["spec"]["template"]
        container = template["spec"]["containers"][0]
        state: dict[str, Any] = (
            {"waiting": {"reason": waiting, "message": "back-off"}} if waiting else {"running": {}}
        )
        return {
            "metadata": {
                "name": f"{ds['metadata']['name']}-{node}",
                "namespace": "gpu-operator",
                "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [{"kind": "DaemonSet", "uid": ds["metadata"]["uid"]}],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": container["name"], "image": container["image"]}],
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready and not waiting else "False"}],
                "containerStatuses": [
                    {"name": container["name"], "ready": ready, "restartCount": 0, "state": state}
                ],
            },
        }

    def report(self, **kwargs: Any) -> drift.Report:
        snapshot = refresh.refresh(self.cluster, self.spec, self.state)
        inputs = drift.Inputs(
            spec=self.spec,
            state=self.state,
            snapshot=snapshot,
            pods=[pod_facts(pod, now=NOW) for pod in self.pods],
            scrapes=kwargs.pop("scrapes", self.scrapes),
            checked_at="2026-11-29T18:00:00Z",
            now=NOW,
            **kwargs,
        )
        return drift.build_report(inputs)


def live_manifest(lab: Lab, key: ObjectKey) -> dict[str, Any]:
    live = lab.cluster.read(key)
    assert live is not None
    return copy.deepcopy(dict(live.manifest))


def kinds(report: drift.Report) -> list[str]:
    return [finding.kind for finding in report.findings]


@pytest.fixture
def lab() -> Lab:
    return Lab([gpu_node("gpu-a"), gpu_node("gpu-b"), make_node("cpu-0", gpu=None)])


def test_an_applied_healthy_stack_has_no_drift_and_full_coverage(lab: Lab) -> None:
    report = lab.report()
    assert report.findings == () and not report.drift
    document = report.document()
    assert document["coverage"]["ratio"] == 1.0 and document["coverage"]["managed"] == len(
        lab.state.resources
    )
    cells = {n["name"]: {c: v["status"] for c, v in n["components"].items()} for n in document["nodes"]}
    assert cells["gpu-a"] == dict.fromkeys(cells["gpu-a"], "ok")
    assert cells["cpu-0"] == dict.fromkeys(cells["cpu-0"], "n/a"), "a node without GPU is not targeted"
    assert document["summary"] == {
        "findings": dict.fromkeys(drift.KINDS, 0),
        "total": 0,
        "ignored": 0,
        "nodes": 3,
        "gpu_nodes": 2,
        "healthy_nodes": 3,
        "telemetry_not_scraped": 0,
    }


def test_an_owned_field_changed_in_the_cluster_is_changed_with_both_values(lab: Lab) -> None:
    live = live_manifest(lab, PLUGIN)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"
    lab.cluster.put(live)
    [finding] = lab.report().findings
    assert (finding.kind, finding.address) == (
        "changed",
        "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
    )
    [field] = finding.data["fields"]
    assert field["before"].endswith(":v0.20.1") and field["after"].endswith(":v0.19.0")
    assert "v0.19.0" in finding.detail and field["path"] in finding.detail


def test_a_deleted_managed_object_is_missing_and_lowers_coverage(lab: Lab) -> None:
    lab.cluster.remove(ObjectKey("v1", "Service", "gpu-operator", "nvidia-dcgm-exporter"))
    report = lab.report()
    assert kinds(report) == ["missing"]
    assert report.findings[0].address == "dcgmExporter/Service/gpu-operator/nvidia-dcgm-exporter"
    assert report.document()["coverage"]["managed"] == len(lab.state.resources) - 1


def test_a_foreign_device_plugin_is_unmanaged_unless_the_spec_makes_it_external(lab: Lab) -> None:
    other = live_manifest(lab, PLUGIN)
    other["metadata"] = {"name": "nvidia-device-plugin", "namespace": "ml-team"}
    lab.cluster.put(other)
    report = lab.report()
    assert kinds(report) == ["unmanaged"]
    finding = report.findings[0]
    assert finding.address == "apps/v1/DaemonSet/ml-team/nvidia-device-plugin"
    assert finding.component == "devicePlugin" and "deployed by hand" in finding.detail
    assert report.document()["coverage"]["unmanaged"] == 1

    external = Lab([gpu_node("gpu-a")], SPEC + "  devicePlugin: {owner: external}\n")
    external.cluster.put(other)
    assert "unmanaged" not in kinds(external.report()), "an external owner accounts for it"


def test_a_node_with_another_driver_is_one_version_finding_not_also_unhealthy() -> None:
    lab = Lab([gpu_node("gpu-a"), gpu_node("gpu-b", driver="580.82.07")])
    report = lab.report()
    assert kinds(report) == ["version"]
    finding = report.findings[0]
    assert (finding.node, finding.data["found"], finding.data["expected"]) == (
        "gpu-b",
        "580.82.07",
        "580.105.08",
    )
    assert "gpu-b" in finding.detail and "580.82.07" in finding.detail and "580.105.08" in finding.detail
    node = next(n for n in report.nodes if n.row.name == "gpu-b")
    assert node.cells["driver"].status == "unhealthy" and node.cells["gfd"].status == "ok", (
        "the driver column carries the mismatch; GFD reported it correctly"
    )


def test_the_driver_version_comes_from_dcgm_when_gfd_has_not_labelled_it() -> None:
    node = gpu_node("gpu-a")
    del node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]
    lab = Lab([node])
    lab.scrapes = {"gpu-a": Scrape("exporter", text=scrape_text("gpu-a", 2, driver="570.195.03"))}
    report = lab.report()
    version = [f for f in report.findings if f.kind == "version"]
    assert [(f.node, f.data["found"], f.data["source"]) for f in version] == [("gpu-a", "570.195.03", "dcgm")]
    assert report.document()["nodes"][0]["driver"] == {"version": "570.195.03", "source": "dcgm"}


def test_pods_that_crash_or_are_absent_are_unhealthy_or_missing(lab: Lab) -> None:
    lab.pods = [
        pod for pod in lab.pods if not pod["metadata"]["name"].startswith("nvidia-operator-validator")
    ]
    lab.pods = [
        lab.pod("gfd", "gpu-a", waiting="CrashLoopBackOff")
        if pod["metadata"]["name"] == "gpu-feature-discovery-gpu-a"
        else pod
        for pod in lab.pods
    ]
    report = lab.report()
    cells = {(f.component, f.node): f.data["status"] for f in report.findings if f.kind == "unhealthy"}
    assert cells == {
        ("gfd", "gpu-a"): "unhealthy",
        ("validator", "gpu-a"): "missing",
        ("validator", "gpu-b"): "missing",
    }
    gfd = next(f for f in report.findings if f.component == "gfd")
    assert "CrashLoopBackOff" in gfd.detail and "gpu-a" in gfd.detail


def test_wrong_allocatable_and_a_missing_gfd_label_name_the_node(lab: Lab) -> None:
    node = gpu_node("gpu-a")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    del node["metadata"]["labels"]["nvidia.com/gpu.family"]
    lab.cluster.put_node(node)
    details = sorted(f.detail for f in lab.report().findings)
    assert details == [
        "devicePlugin on node gpu-a: allocatable nvidia.com/gpu is 1, expected 2",
        "gfd on node gpu-a: label nvidia.com/gpu.family missing",
    ]


def test_a_pod_on_another_image_than_the_spec_is_a_version_finding(lab: Lab) -> None:
    pod = lab.pod("dcgmExporter", "gpu-b")
    pod["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless"
    lab.pods = [pod if p["metadata"]["name"] == pod["metadata"]["name"] else p for p in lab.pods]
    [finding] = lab.report().findings
    assert (finding.kind, finding.component, finding.node) == ("version", "dcgmExporter", "gpu-b")
    assert finding.data["found"].endswith("4.5.2-4.8.1-distroless")
    assert finding.data["expected"].endswith("4.6.0-4.8.3-distroless")


def test_a_hot_gpu_and_an_xid_are_telemetry_findings_heavy_load_is_only_shown(lab: Lab) -> None:
    lab.scrapes = {
        "gpu-a": Scrape("e", text=scrape_text("gpu-a", 2, temperature=95, xid=79)),
        "gpu-b": Scrape("e", text=scrape_text("gpu-b", 2, util=97)),
    }
    report = lab.report()
    found = {(f.kind, f.node, f.data["gpu"], f.data["uuid"], f.data["metric"]) for f in report.findings}
    assert found == {
        ("telemetry", "gpu-a", "0", "GPU-gpu-a-0", "DCGM_FI_DEV_GPU_TEMP"),
        ("telemetry", "gpu-a", "0", "GPU-gpu-a-0", "DCGM_FI_DEV_XID_ERRORS"),
    }
    assert len(report.findings) == 2
    assert [n.heavy_load for n in report.nodes if n.row.name == "gpu-b"] == [("0",)]
    cooler = lab.report(thresholds=Thresholds(temperature_c=100))
    assert [f.data["metric"] for f in cooler.findings] == ["DCGM_FI_DEV_XID_ERRORS"]


def test_metrics_missing_for_a_gpu_or_unreadable_make_the_exporter_unhealthy(lab: Lab) -> None:
    lab.scrapes = {
        "gpu-a": Scrape("e", text=scrape_text("gpu-a", 1)),
        "gpu-b": Scrape("e", error="503 no endpoints"),
    }
    details = sorted(f.detail for f in lab.report().findings)
    assert details == [
        "dcgmExporter on node gpu-a: DCGM metrics have 1 samples of DCGM_FI_DEV_GPU_TEMP, expected 2",
        "dcgmExporter on node gpu-b: DCGM metrics of e could not be read: 503 no endpoints",
    ]


def test_unscraped_nodes_are_not_drift_and_say_why(lab: Lab) -> None:
    report = lab.report(scrapes={}, unscraped_reason="--no-telemetry")
    assert report.findings == ()
    assert report.nodes[1].cells["dcgmExporter"].reason == "healthy; metrics not scraped (--no-telemetry)"


def test_telemetry_targets_pick_one_ready_exporter_per_node_and_note_a_cap(lab: Lab) -> None:
    pods = [pod_facts(p, now=NOW) for p in lab.pods]
    targets, note = drift.telemetry_targets(pods, max_nodes=None)
    assert [(t.node, t.pod) for t in targets] == [
        ("gpu-a", "nvidia-dcgm-exporter-gpu-a"),
        ("gpu-b", "nvidia-dcgm-exporter-gpu-b"),
    ]
    assert note is None
    capped, note = drift.telemetry_targets(pods, max_nodes=1)
    assert [t.node for t in capped] == ["gpu-a"] and note is not None and "scraped 1 of 2" in note


def test_pod_facts_keep_the_health_verdicts_taken_on_the_whole_pod(lab: Lab) -> None:
    full = lab.pod("gfd", "gpu-a", waiting="ImagePullBackOff")
    full["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    full["spec"]["volumes"] = [{"name": "x" * 1000}]
    facts = pod_facts(full, now=NOW)
    assert facts is not None and (facts.component, facts.node) == ("gfd", "gpu-a")
    failure = pod_failure([full], NOW, 15)
    assert failure is not None and facts.failure == failure.message
    assert facts.image == full["spec"]["containers"][0]["image"] and not facts.ready
    shape = facts.as_pod()
    assert (pod_ready(shape), node_of(shape), pod_name(shape)) == (False, "gpu-a", full["metadata"]["name"])
    assert current_pods(lab.daemonset("gfd"), [shape]) == [shape], "owned by the live DaemonSet"
    unscheduled = lab.pod("gfd", "gpu-a")
    del unscheduled["spec"]["nodeName"]
    assert pod_facts(unscheduled, now=NOW) is None, "no node, no cell"


def test_a_node_not_scraped_after_retries_is_a_note_not_drift_and_the_exit_code_judges_the_rest(
    lab: Lab,
) -> None:
    reason = "scrape gpu-operator/e:9400/metrics: the cluster answered 503 (after 5 attempts)"
    partial = lab.report(scrapes={"gpu-a": lab.scrapes["gpu-a"]}, not_scraped={"gpu-b": reason})
    assert partial.findings == () and partial.exit_code() == 0
    assert (
        node_status(partial, "gpu-b").cells["dcgmExporter"].reason
        == f"healthy; metrics not scraped (not scraped: {reason})"
    )
    assert node_status(partial, "gpu-b").document()["telemetry"]["error"] == f"not scraped: {reason}"
    assert partial.document()["notes"] == [
        f"not scraped: 1 node(s) (gpu-b): {reason}; their GPU telemetry was not judged"
    ]
    nothing = lab.report(scrapes={}, not_scraped={"gpu-a": reason, "gpu-b": reason})
    assert nothing.findings == () and nothing.exit_code() == 1, (
        "no GPU judged: could not check, never a false 0"
    )
    lab.pods = [
        lab.pod("gfd", "gpu-a", waiting="CrashLoopBackOff")
        if pod["metadata"]["name"] == "gpu-feature-discovery-gpu-a"
        else pod
        for pod in lab.pods
    ]
    drifted = lab.report(scrapes={}, not_scraped={"gpu-a": reason, "gpu-b": reason})
    assert drifted.exit_code() == 2 and kinds(drifted) == ["unhealthy"], "what was judged drifted: 2"


def test_a_pod_running_but_not_ready_is_an_unhealthy_cell_naming_the_pod_and_why(lab: Lab) -> None:
    pod = lab.pod("devicePlugin", "gpu-b", ready=False)
    pod["status"]["conditions"][0].update(
        reason="ContainersNotReady", message="containers with unready status: x"
    )
    lab.pods = [pod if p["metadata"]["name"] == pod["metadata"]["name"] else p for p in lab.pods]
    report = lab.report()
    cell = node_status(report, "gpu-b").cells["devicePlugin"]
    assert cell.status == "unhealthy"
    assert cell.reason == f"pod {pod['metadata']['name']} is not Ready (containers with unready status: x)"
    assert [(f.kind, f.component, f.node) for f in report.findings] == [
        ("unhealthy", "devicePlugin", "gpu-b")
    ]


def node_status(report: drift.Report, name: str) -> drift.NodeStatus:
    return next(node for node in report.nodes if node.row.name == name)


def test_a_hand_written_gpu_count_is_gfds_drift_attributed_to_who_wrote_it() -> None:
    """`kubectl label --overwrite nvidia.com/gpu.count=4` on a node with 8 GPUs (the device plugin
    advertises 8, the exporter reports 8): GFD's cell is unhealthy naming the writer; the device plugin and
    the exporter, which were blamed before, are ok."""
    edited = gpu_node("gpu-a", count=8)
    edited["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
    edited["status"]["capacity"] = {"nvidia.com/gpu": "8"}
    edited["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-label",
            "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
        },
    ]
    lab = Lab([edited])
    lab.scrapes = {"gpu-a": Scrape("nvidia-dcgm-exporter-gpu-a", text=scrape_text("gpu-a", 8))}
    report = lab.report()
    cells = node_status(report, "gpu-a").cells
    assert cells["gfd"].status == "unhealthy" and "written by kubectl-label" in cells["gfd"].reason
    assert cells["devicePlugin"].status == "ok" and cells["dcgmExporter"].status == "ok"
    assert [(f.kind, f.component) for f in report.findings] == [("unhealthy", "gfd")]


def test_the_matrix_has_a_column_per_component_owned_or_found(lab: Lab) -> None:
    """The mig-manager is off by default: no column, until something of it is there."""
    assert lab.report().document()["components"] == [
        "driver",
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
    ]
    leftover = copy.deepcopy(lab.pods[0])
    leftover["metadata"]["labels"]["gpuplan.io/component"] = "migManager"
    lab.pods.append(leftover)
    document = lab.report().document()
    assert document["components"][-1] == "migManager"
    assert {n["components"]["migManager"]["status"] for n in document["nodes"]} == {"n/a"}


GFD = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "gpu-feature-discovery")
HAND_GFD = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"


def set_gfd_image_by_hand(lab: Lab) -> None:
    """``kubectl set image`` on GFD's DaemonSet, and the DaemonSet controller's new pods on every node."""
    live = live_manifest(lab, GFD)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = HAND_GFD
    lab.cluster.put(live)
    for pod in lab.pods:
        if pod["metadata"]["labels"].get("gpuplan.io/component") == "gfd":
            pod["spec"]["containers"][0]["image"] = HAND_GFD


def test_one_daemonset_changed_by_hand_is_one_finding_listing_the_nodes_it_reaches(lab: Lab) -> None:
    set_gfd_image_by_hand(lab)
    report = lab.report()
    [finding] = report.findings
    assert (finding.kind, finding.address) == ("changed", "gfd/DaemonSet/gpu-operator/gpu-feature-discovery")
    assert finding.data["nodes"] == ["gpu-a", "gpu-b"]
    assert "2 node(s) (gpu-a, gpu-b)" in finding.detail
    document = report.document()
    assert document["findings"][0]["nodes"] == ["gpu-a", "gpu-b"]
    cells = {n["name"]: n["components"]["gfd"] for n in document["nodes"]}
    assert cells["gpu-a"]["status"] == cells["gpu-b"]["status"] == "drifted", "the table agrees"
    assert "gpu-feature-discovery changed outside gpuplan" in cells["gpu-a"]["reason"]
    assert cells["cpu-0"]["status"] == "n/a"


def test_a_pod_on_another_image_marks_its_cell_drifted(lab: Lab) -> None:
    pod = lab.pod("dcgmExporter", "gpu-b")
    pod["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless"
    lab.pods = [pod if p["metadata"]["name"] == pod["metadata"]["name"] else p for p in lab.pods]
    nodes = {n["name"]: n["components"]["dcgmExporter"]["status"] for n in lab.report().document()["nodes"]}
    assert (nodes["gpu-a"], nodes["gpu-b"]) == ("ok", "drifted")


def test_an_ignored_image_change_is_shown_as_ignored_with_its_nodes_and_is_no_drift() -> None:
    rule = (
        "  ignore:\n    - address: gfd/DaemonSet/gpu-operator/gpu-feature-discovery\n"
        "      paths: [spec.template.spec.containers]\n"
    )
    lab = Lab([gpu_node("gpu-a"), gpu_node("gpu-b"), make_node("cpu-0", gpu=None)], SPEC + rule)
    set_gfd_image_by_hand(lab)
    report = lab.report()
    assert report.findings == () and report.exit_code() == 0
    [ignored] = report.ignored
    assert (ignored.address, ignored.data["nodes"]) == (
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        ["gpu-a", "gpu-b"],
    )
    document = report.document()
    assert document["summary"]["ignored"] == 1 and document["ignored"][0]["fields"][0]["after"] == HAND_GFD
    cells = {n["name"]: n["components"]["gfd"] for n in document["nodes"]}
    assert cells["gpu-a"]["status"] == "ok" and "spec.ignore" in cells["gpu-a"]["reason"]
