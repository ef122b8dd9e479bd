"""The drift CronJob of a stack whose state is in the cluster (``kubernetes://gpu-operator/lab``), end to end
on the simulator: no Secret is copied, the job reads Secret ``gpuplan-state-lab`` itself with its
ServiceAccount, and that account may read nothing else of the namespace's Secrets, write no state and touch
no Lease (``kubectl auth can-i --as``, which the simulator's RBAC authorizer answers as the API server does).

The state is moved there with ``gpuplan state migrate`` and the local file removed, and the ConfigMap holds
only the spec: a job that finds no drift read the state from the cluster (without one it exits 1, "no state
to compare with")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_drift_cronjob_flow import exit_code, gpuplan, report_of
from test_drift_incluster_rbac import service_account_kubeconfig
from test_drift_lab import LAB_SPEC, put_stack_in_place

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, needs_sandbox

NAMESPACE = "gpu-operator"
STATE = f"kubernetes://{NAMESPACE}/lab"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:gpuplan-drift"
PLUGIN = "daemonset/nvidia-device-plugin-daemonset"
STATE_OBJECTS = (("secret", "gpuplan-state-lab"), ("lease", "gpuplan-lock-lab"))


def state_in_the_cluster(kubeconfig: Path, folder: Path) -> Path:
    """The lab put in place, its state migrated to :data:`STATE` and the local copy deleted."""
    spec_file = put_stack_in_place(kubeconfig, folder, LAB_SPEC)
    moved = gpuplan("--kubeconfig", str(kubeconfig), "state", "migrate", "-f", str(spec_file), "--to", STATE)
    assert moved.returncode == 0, moved.stderr
    for leftover in folder.glob("gpuplan.state.json*"):
        leftover.unlink()
    return spec_file


def printed_cronjob(spec_file: Path, *args: str) -> str:
    printed = gpuplan("drift", "cronjob", "-f", str(spec_file), "--state", STATE, *args)
    assert printed.returncode == 0, printed.stderr
    return printed.stdout


def resource_version(kubectl: Kubectl, kind: str, name: str) -> str:
    found = json.loads(kubectl("get", "-n", NAMESPACE, kind, name, "-o", "json").stdout)
    return str(found["metadata"]["resourceVersion"])


def run_job(kubectl: Kubectl, job: str, condition: str) -> None:
    kubectl("-n", NAMESPACE, "create", "job", job, "--from=cronjob/gpuplan-drift")
    kubectl("wait", "-n", NAMESPACE, f"--for=condition={condition}", f"job/{job}", "--timeout=120s")


@pytest.mark.usefixtures("lab_sim")
@needs_sandbox()
def test_the_cronjob_reads_the_cluster_state_and_fails_its_job_on_a_changed_image(
    kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec_file = state_in_the_cluster(kubeconfig, tmp_path)
    printed = printed_cronjob(spec_file)
    cron = next(doc for doc in yaml.safe_load_all(printed) if doc and doc["kind"] == "CronJob")
    pod: dict[str, Any] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert all("secret" not in volume for volume in pod["volumes"]), "no copied state Secret is mounted"
    kubectl("apply", "-f", "-", input=printed)
    stored = {kind: resource_version(kubectl, kind, name) for kind, name in STATE_OBJECTS}

    run_job(kubectl, "drift-clean", "Complete")
    assert exit_code(kubectl, "drift-clean") == 0
    clean = report_of(kubectl, "drift-clean")
    assert clean["drift"] is False and clean["findings"] == []
    assert {kind: resource_version(kubectl, kind, name) for kind, name in STATE_OBJECTS} == stored, (
        "the report neither writes the state nor takes its Lease"
    )

    kubectl("set", "image", "-n", NAMESPACE, PLUGIN, "nvidia-device-plugin=registry.example.com/plugin:v0")
    run_job(kubectl, "drift-image", "Failed")
    assert exit_code(kubectl, "drift-image") == 2
    drifted = report_of(kubectl, "drift-image")
    assert drifted["drift"] is True
    [changed] = [finding for finding in drifted["findings"] if finding["kind"] == "changed"]
    assert changed["address"] == "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
    assert changed["fields"][0]["after"] == "registry.example.com/plugin:v0"
    drifted_condition = kubectl(
        "get", "gpustack", "lab", "-o", "jsonpath={.status.conditions[?(@.type=='Drifted')].status}"
    ).stdout
    assert drifted_condition == "True", "the job's report wrote its verdict to the stack's GPUStack status"


GPUSTACK_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gpustacks.gpuplan.io}
spec:
  group: gpuplan.io
  scope: Cluster
  names: {kind: GPUStack, listKind: GPUStackList, plural: gpustacks, singular: gpustack}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


def gpustacks_known(kubectl: Kubectl) -> None:
    """kubectl resolves ``gpustacks.gpuplan.io`` by discovery, so the CRD must be served for can-i to ask
    about it (where the stack's validator has not installed it already)."""
    if kubectl("get", "crd", "gpustacks.gpuplan.io", check=False).returncode != 0:
        kubectl("create", "-f", "-", input=GPUSTACK_CRD)
        kubectl("wait", "--for=condition=Established", "crd/gpustacks.gpuplan.io", "--timeout=60s")


def can(kubectl: Kubectl, *args: str) -> bool:
    answer = kubectl("auth", "can-i", *args, "-n", NAMESPACE, "--as", ACCOUNT, check=False)
    assert answer.stdout in ("yes\n", "no\n"), answer.stderr
    return answer.stdout == "yes\n"


def test_the_job_s_account_reads_only_the_state_s_secrets_and_writes_only_its_stack_s_status(
    lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec_file = state_in_the_cluster(kubeconfig, tmp_path)
    kubectl("apply", "-f", "-", input=printed_cronjob(spec_file, "--state-parts", "2"))
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "other", "--from-literal=token=x")
    gpustacks_known(kubectl)

    for name in ("gpuplan-state-lab", "gpuplan-state-lab-part-1", "gpuplan-state-lab-part-2"):
        assert can(kubectl, "get", f"secret/{name}")
    assert not can(kubectl, "get", "secret/gpuplan-state-lab-part-3"), "parts past --state-parts"
    assert not can(kubectl, "get", "secret/other")
    assert not can(kubectl, "list", "secrets")
    assert not can(kubectl, "get", "secret/gpuplan-state-other"), "another state's Secret"
    for verb in ("update", "patch", "delete"):
        assert not can(kubectl, verb, "secret/gpuplan-state-lab")
    assert not can(kubectl, "create", "secrets")
    for verb in ("get", "update", "patch", "create", "delete"):
        assert not can(kubectl, verb, "leases.coordination.k8s.io/gpuplan-lock-lab")
    assert can(kubectl, "patch", "gpustacks.gpuplan.io/lab", "--subresource=status")
    assert not can(kubectl, "patch", "gpustacks.gpuplan.io/other", "--subresource=status")
    assert not can(kubectl, "patch", "gpustacks.gpuplan.io/lab"), "the status only, not the object"
    assert not can(kubectl, "create", "gpustacks.gpuplan.io")

    # the report itself, as that account: it reads the state with no Lease access at all
    config = service_account_kubeconfig(lab_sim, kubectl, tmp_path / "sa-kubeconfig")
    report = ["--kubeconfig", str(config), "drift", "report", "-f", str(spec_file), "--state", STATE]
    allowed = gpuplan(*report, "--format", "json", "--no-telemetry")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["drift"] is False
