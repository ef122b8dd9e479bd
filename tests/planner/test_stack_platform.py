"""Plan and drift render the stack for one platform: the same OS tag and container runtime on a mixed cluster.

On three GPU nodes (one ubuntu22.04 with containerd, two ubuntu24.04 with cri-o) the plan once rendered the
most common pair (ubuntu24.04, cri-o) and the drift report the operator's (the first GPU node's OS, containerd
preferred), so a stack applied from the plan showed up in the drift report as running the wrong driver image.
"""

from __future__ import annotations

from typing import Any

from gpuplan.modules.base import Address, DesiredObject
from gpuplan.planner.drift import report as drift
from gpuplan.planner.drift.pods import pod_facts
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.state.model import StateFile

from .conftest import make_node

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: fleet}
spec:
  driver: {version: "580.105.08"}
  toolkit: {}
  devicePlugin: {owner: none}
  gfd: {owner: none}
  dcgmExporter: {owner: none}
  validator: {owner: none}
"""
NOW = 1_800_000_000.0


def mixed_nodes() -> list[dict[str, Any]]:
    jammy = make_node("gpu-a", labels={"feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"})
    nobles = [make_node(name) for name in ("gpu-b", "gpu-c")]
    for node in nobles:
        node["status"]["nodeInfo"]["containerRuntimeVersion"] = "cri-o://1.33.2"
    return [jammy, *nobles]


def containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return list(manifest["spec"]["template"]["spec"]["containers"])


def test_plan_renders_for_the_operators_platform() -> None:
    spec = parse_spec(SPEC, filename="gpustack.yaml")
    cluster = FakeKubernetes(nodes=mixed_nodes())
    plan = make_plan(spec, None, refresh.refresh(cluster, spec, None), created_at="2026-12-01T00:00:00Z")
    after = {change.address: change.after for change in plan.changes if change.after}
    driver = after["driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"]
    assert containers(driver)[0]["image"].endswith("-ubuntu22.04")
    toolkit = after["toolkit/DaemonSet/gpu-operator/nvidia-container-toolkit-daemonset"]
    env = {e["name"]: e.get("value") for e in containers(toolkit)[0].get("env", ())}
    assert env.get("RUNTIME") == "containerd"


def test_a_stack_applied_from_the_plan_shows_no_version_drift() -> None:
    spec = parse_spec(SPEC, filename="gpustack.yaml")
    cluster = FakeKubernetes(nodes=mixed_nodes())
    plan = make_plan(spec, None, refresh.refresh(cluster, spec, None), created_at="2026-12-01T00:00:00Z")
    records, pods = [], []
    for change in plan.changes:
        assert change.after is not None
        live = cluster.put(change.after)
        records.append(
            adopt.record_applied(DesiredObject(Address.parse(change.address), change.after), live, serial=1)
        )
        if change.kind == "DaemonSet":
            pods += [daemon_pod(live.manifest, node) for node in ("gpu-a", "gpu-b", "gpu-c")]
    state = StateFile.new().with_records(records).next_serial()
    snapshot = refresh.refresh(cluster, spec, state)
    report = drift.build_report(
        drift.Inputs(
            spec=spec,
            state=state,
            snapshot=snapshot,
            pods=[pod_facts(pod, now=NOW) for pod in pods],
            scrapes={},
            checked_at="2026-12-01T00:00:00Z",
            now=NOW,
        )
    )
    assert [f.message for f in report.findings if f.kind == "version"] == []


def daemon_pod(ds: Any, node: str) -> dict[str, Any]:
    template = ds["spec"]["template"]
    return {
        "metadata": {
            "name": f"{ds['metadata']['name']}-{node}",
            "namespace": ds["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "ownerReferences": [{"kind": "DaemonSet", "uid": ds["metadata"]["uid"]}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": c["name"], "image": c["image"]} for c in template["spec"]["containers"]],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": c["name"], "ready": True, "restartCount": 0, "state": {"running": {}}}
                for c in template["spec"]["containers"]
            ],
        },
    }
