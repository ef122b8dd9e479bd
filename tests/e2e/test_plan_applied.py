"""Plans against a lab where the stack was applied "as apply will" (objects created from the plan's desired
manifests with the Python client, recorded through the state API): no false changes, drift from `kubectl set
image` / `kubectl patch` attributed to its manager, and saved plans refused as stale once the state or a live
object moved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config, dynamic
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.errors import StalePlanError
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan import planfile
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.snapshot import ClusterSnapshot, ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

SPEC = lab_spec(devicePlugin="{owner: external}")
GFD = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
GPU_PRESENT = "nvidia.com/gpu.present"
EXPORTER = "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter"


@pytest.fixture
def applied(tmp_path: Path, lab_sim: Simulator, kubeconfig: Path) -> Iterator[Path]:
    """The spec's objects created in the lab and recorded in gpuplan.state.json beside the spec."""
    spec_file = tmp_path / "gpustack.yaml"
    spec_file.write_text(SPEC)
    spec = load_spec(spec_file)
    client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        api = dynamic.DynamicClient(client)  # type: ignore[no-untyped-call]
        api.resources.get(api_version="v1", kind="Namespace").create(
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
        )
        records = []
        with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
            for obj in spec.desired_objects():
                manifest = dict(obj.manifest)
                api.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"]).create(
                    body=manifest, namespace=manifest["metadata"].get("namespace")
                )
                records.append(adopt.record_applied(obj, provider.read(ObjectKey.of(manifest)), serial=1))
        # apply's first write: the operator's GPU-node label, recorded as gpuplan's
        api.resources.get(api_version="v1", kind="Node").patch(
            name="lab-node",
            body={"metadata": {"labels": {GPU_PRESENT: "true"}}},
            content_type="application/merge-patch+json",
        )
    finally:
        client.close()
    state = StateFile.new().with_records(records).next_serial()
    state = state.model_copy(update={"node_labels": {"lab-node": {GPU_PRESENT: "true"}}})
    LocalFileBackend(tmp_path / "gpuplan.state.json").write(state)
    assert lab_sim.wait_idle(30)
    yield spec_file


def plan_document(kubeconfig: Path, spec_file: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--json", *extra]) in (0, 2)
    document: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return document


def test_an_applied_stack_plans_no_changes(
    applied: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(applied), "--detailed-exitcode"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("No changes. The cluster matches the configuration.")
    assert (
        "  driver        external  verified: expected 580.105.08; verified 580.105.08 on 1/1 nodes\n" in out
    ), "GFD now runs and reports the host driver"


def test_kubectl_edits_show_as_drift_with_their_managers(
    applied: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl(
        "set",
        "image",
        "-n",
        "gpu-operator",
        "daemonset/nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter=nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless",
        kubeconfig=kubeconfig,
    )
    kubectl(
        "patch",
        "-n",
        "gpu-operator",
        "daemonset/gpu-feature-discovery",
        "--type=merge",
        "-p",
        '{"spec":{"template":{"spec":{"priorityClassName":"system-cluster-critical"}}}}',
        kubeconfig=kubeconfig,
    )
    document = plan_document(kubeconfig, applied, capsys)
    drift = {item["address"]: item["fields"] for item in document["drift"]}
    assert drift[EXPORTER] == [
        {
            "path": "spec.template.spec.containers[name=nvidia-dcgm-exporter].image",
            "before": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
            "after": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless",
            "managers": ["kubectl-set"],
        }
    ]
    assert drift[GFD] == [
        {
            "path": "spec.template.spec.priorityClassName",
            "before": "system-node-critical",
            "after": "system-cluster-critical",
            "managers": ["kubectl-patch"],
        }
    ]
    reverts = {c["address"]: c["reason"] for c in document["changes"] if c["action"] == "update"}
    assert reverts == {EXPORTER: "UPDATE_BECAUSE_DRIFT", GFD: "UPDATE_BECAUSE_DRIFT"}

    refresh_only = plan_document(kubeconfig, applied, capsys, "--refresh-only")
    assert refresh_only["changes"] == [] and len(refresh_only["drift"]) == 2
    assert (
        run(
            [
                "--kubeconfig",
                str(kubeconfig),
                "plan",
                "-f",
                str(applied),
                "--refresh-only",
                "--detailed-exitcode",
            ]
        )
        == 2
    )
    assert "(changed by kubectl-set)" in capsys.readouterr().out


def test_a_saved_plan_goes_stale_when_a_live_object_or_the_state_changes(
    applied: Path, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    saved = tmp_path / "saved.plan"
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(applied), "--out", str(saved)]) == 0
    plan = planfile.read(saved)
    spec = load_spec(applied)
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")

    def current() -> tuple[StateFile | None, ClusterSnapshot]:
        state = backend.read()
        with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
            return state, refresh.refresh(provider, spec, state)

    state, snapshot = current()
    planfile.check(plan, state, snapshot)  # fresh: nothing moved

    kubectl(
        "patch",
        "-n",
        "gpu-operator",
        "serviceaccount/nvidia-dcgm-exporter",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"team":"ml"}}}',
        kubeconfig=kubeconfig,
    )
    state, snapshot = current()
    with pytest.raises(StalePlanError) as moved:
        planfile.check_fresh(plan, state, snapshot)
    assert (
        "v1/ServiceAccount/gpu-operator/nvidia-dcgm-exporter changed after the plan was made"
        in moved.value.detail
    )

    assert state is not None
    backend.write(state.tainted(GFD).next_serial())
    state, snapshot = current()
    with pytest.raises(StalePlanError) as serial:
        planfile.check_fresh(plan, state, snapshot)
    assert "state serial 1 -> 2" in serial.value.detail
