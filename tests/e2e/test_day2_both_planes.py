"""Day-2 stories on the built-in control plane and on a real one (kube-apiserver, etcd, the real controllers
and scheduler, the GPU nodes simulated through the API): a driver upgrade that evicts GPU pods node by node
and stops at a PodDisruptionBudget, drift found and remediated, a rollback to the generation before, and a
takeover from the GPU Operator and back. Everything is done through the API (kubectl, gpuplan's own client)
and gpuplan's commands, as a user would; after each apply ``plan --detailed-exitcode`` exits 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from deepdiff import DeepDiff
from lab_stack import LAB_SPEC, STACK_HEADER

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.testing import ClusterFactory, Kubectl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OLD, NEW = "580.105.08", "595.91.07"
NODES = [f"gpu-node-{i}" for i in range(1, 5)]
DRIVER = "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
NAMESPACE = "gpu-operator"
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"
GFD = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
SERVER_METADATA = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "annotations")
APPLY_TIMEOUT = 300.0


def started(
    cluster_factory: ClusterFactory, scenario: str, folder: Path, spec_text: str
) -> tuple[Any, Path, Path]:
    """A cluster of ``scenario`` on the test's control plane, its kubeconfig, and ``spec_text`` written as
    the spec in ``folder`` (the state is kept beside it)."""
    cluster: Any = cluster_factory(scenario)
    spec = folder / "gpustack.yaml"
    spec.write_text(spec_text)
    return cluster, cluster.write_kubeconfig(folder / "kubeconfig"), spec


def no_changes(kubeconfig: Path, spec: Path) -> None:
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes. The cluster matches the configuration." in plan.stdout


def applied(kubeconfig: Path, spec: Path) -> str:
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    no_changes(kubeconfig, spec)
    return done.stdout


def kubectl_apply(kubectl: Kubectl, kubeconfig: Path, *objects: dict[str, Any]) -> None:
    """``kubectl apply`` of ``objects`` as YAML documents (not a v1 List, which kubectl validates against
    /openapi/v2, which the built-in server does not serve)."""
    kubectl("apply", "-f", "-", kubeconfig=kubeconfig, input="\n---\n".join(map(json.dumps, objects)))


def get_json(kubectl: Kubectl, kubeconfig: Path, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", *args, "-o", "json", kubeconfig=kubeconfig).stdout)
    return found


# ------------------------------------------------------------------------ (a) a driver upgrade's evictions


def driver_spec(version: str, eviction_timeout: int, *, force: bool = True) -> str:
    return STACK_HEADER + (
        f'  driver:\n    version: "{version}"\n    healthTimeoutSeconds: 120\n'
        f"    upgradePolicy: {{podDeletion: {{force: {str(force).lower()}, "
        f"timeoutSeconds: {eviction_timeout}}}}}\n"
        "  toolkit: {}\n"
        "  devicePlugin: {version: v0.20.1}\n"
        "  gfd: {version: v0.20.1}\n"
        "  dcgmExporter: {version: 4.6.0-4.8.3-distroless}\n"
        "  validator: {}\n"
    )


def gpu_container(name: str, gpus: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }


def training_pods() -> list[dict[str, Any]]:
    """One GPU pod of no controller per node (``podDeletion.force`` lets the rollout delete them)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"train-{node}", "namespace": "default"},
            "spec": {"nodeName": node, "containers": [gpu_container("train", 2)]},
        }
        for node in NODES
    ]


def guarded_workload(kubectl: Kubectl, kubeconfig: Path, node: str) -> None:
    """A one-replica Deployment's GPU pod on ``node`` under a PodDisruptionBudget of ``maxUnavailable: 0``.

    The Deployment is paused, so that no controller makes pods on either plane (the built-in one runs no
    Deployment controller; a real one leaves a paused Deployment without a ReplicaSet: sync() in
    pkg/controller/deployment/sync.go creates none): the pod, made here and naming it as its controller,
    is its one replica. The disruption controller counts its scale (1) as the expected pods
    (getExpectedScale, pkg/controller/disruption/disruption.go), so the budget needs 1 healthy pod of 1."""
    labels = {"app": "inference"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inference", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "paused": True,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [gpu_container("serve", 1)]}},
        },
    }
    kubectl_apply(kubectl, kubeconfig, deployment)
    uid = get_json(kubectl, kubeconfig, "deployment", "-n", "default", "inference")["metadata"]["uid"]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "inference",
        "uid": uid,
        "controller": True,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "inference-0",
            "namespace": "default",
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node, "containers": [gpu_container("serve", 1)]},
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "inference", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
    }
    kubectl_apply(kubectl, kubeconfig, pod, budget)
    kubectl(
        "wait",
        "-n",
        "default",
        "pdb/inference",
        "--for=jsonpath={.status.currentHealthy}=1",
        "--timeout=60s",
        kubeconfig=kubeconfig,
    )


def node_labels(kubectl: Kubectl, kubeconfig: Path, label: str) -> dict[str, str | None]:
    nodes = get_json(kubectl, kubeconfig, "nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(label) for n in nodes}


def driver_images(kubectl: Kubectl, kubeconfig: Path) -> dict[str, str]:
    pods = get_json(kubectl, kubeconfig, "pods", "-n", NAMESPACE, "-l", "app=nvidia-driver-daemonset")[
        "items"
    ]
    return {
        p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }


def notes(output: str) -> list[str]:
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [e["message"] for e in events if e.get("type") == "note"]


def test_a_driver_upgrade_evicts_node_by_node_and_stops_at_a_disruption_budget(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    _, kubeconfig, spec = started(cluster_factory, "upgrade4", tmp_path, driver_spec(OLD, 30))
    applied(kubeconfig, spec)
    assert node_labels(kubectl, kubeconfig, DRIVER_LABEL) == dict.fromkeys(NODES, OLD)

    kubectl_apply(kubectl, kubeconfig, *training_pods())
    kubectl(
        "wait",
        "-n",
        "default",
        "pod",
        "--all",
        "--for=condition=Ready",
        "--timeout=60s",
        kubeconfig=kubeconfig,
    )
    # without podDeletion.force the pods of no controller block the rollout: the plan says so for each,
    # with the key that lets them go, and apply stops at the first with the same words, evicting nothing
    spec.write_text(driver_spec(NEW, 30, force=False))
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    said = " ".join(plan.stdout.split())  # the view wraps long lines
    for node in NODES:
        assert f"evicts on {node}: default/train-{node}" in said
        assert (
            f"! blocks the rollout: default/train-{node} is not managed by a controller; deleting it "
            "loses it (set spec.driver.upgradePolicy.podDeletion.force: true to delete it anyway)"
        ) in said
    document = json.loads(gpuplan(kubeconfig, "plan", "-f", str(spec), "--json").stdout)
    driver = next(c for c in document["changes"] if c["address"] == DRIVER)
    assert sorted(driver["gpu_pods_blocked"]) == [f"default/train-{node}" for node in NODES]
    refused = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        "default/train-gpu-node-1 is not managed by a controller; deleting it loses it "
        "(set spec.driver.upgradePolicy.podDeletion.force: true to delete it anyway)"
    ) in refused.stdout + refused.stderr
    assert len(get_json(kubectl, kubeconfig, "pods", "-n", "default")["items"]) == len(NODES)
    assert not any(n["spec"].get("unschedulable") for n in get_json(kubectl, kubeconfig, "nodes")["items"])

    guarded_workload(kubectl, kubeconfig, "gpu-node-1")

    # the budget refuses at every try: the rollout stops at its first node, names the budget, and puts the
    # old driver back there
    spec.write_text(driver_spec(NEW, 5))
    refused = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        "gpu-node-1: a PodDisruptionBudget still forbids evicting default/inference-0 after 5s "
        "(The disruption budget inference needs 1 healthy pods and has 1 currently); hint: let that budget "
        "allow a disruption (kubectl get pdb -n default)" in refused.stdout + refused.stderr
    )
    assert "Traceback" not in refused.stderr
    pod = get_json(kubectl, kubeconfig, "pod", "-n", "default", "inference-0")
    assert pod["metadata"].get("deletionTimestamp") is None
    assert node_labels(kubectl, kubeconfig, DRIVER_LABEL) == dict.fromkeys(NODES, OLD)
    assert not any(n["spec"].get("unschedulable") for n in get_json(kubectl, kubeconfig, "nodes")["items"])
    assert set(driver_images(kubectl, kubeconfig).values()) == {f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"}
    names = {p["metadata"]["name"] for p in get_json(kubectl, kubeconfig, "pods", "-n", "default")["items"]}
    # the first node's other GPU pod went; the other nodes were never reached
    assert names == {"inference-0", *(f"train-{node}" for node in NODES[1:])}

    # without the budget the rollout goes node by node and evicts every GPU pod
    kubectl("delete", "pdb", "-n", "default", "inference", kubeconfig=kubeconfig)
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json", timeout=APPLY_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    said = notes(done.stdout)
    order = [
        note.split()[3] for note in said if note.startswith("driver: node ") and note.endswith("upgrade-done")
    ]
    assert order == NODES, said
    no_changes(kubeconfig, spec)
    assert node_labels(kubectl, kubeconfig, DRIVER_LABEL) == dict.fromkeys(NODES, NEW)
    assert not any(n["spec"].get("unschedulable") for n in get_json(kubectl, kubeconfig, "nodes")["items"])
    assert driver_images(kubectl, kubeconfig) == dict.fromkeys(
        NODES, f"nvcr.io/nvidia/driver:{NEW}-ubuntu24.04"
    )
    assert get_json(kubectl, kubeconfig, "pods", "-n", "default")["items"] == []


# ------------------------------------------------------------------ (b) drift, remediation and a rollback


def set_gfd_image(kubectl: Kubectl, kubeconfig: Path, image: str) -> None:
    """A hand ``kubectl set image`` on GFD's DaemonSet."""
    kubectl(
        "set",
        "image",
        "-n",
        NAMESPACE,
        "daemonset/gpu-feature-discovery",
        f"gpu-feature-discovery={image}",
        kubeconfig=kubeconfig,
    )


def owned_objects(kubeconfig: Path, state_file: Path) -> dict[str, dict[str, Any]]:
    """Every object of the state's records as the API server has it, less status and server metadata."""
    state = json.loads(state_file.read_text())
    found: dict[str, dict[str, Any]] = {}
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        for address, record in state["resources"].items():
            key = ObjectKey(record["api_version"], record["kind"], record.get("namespace"), record["name"])
            live = writer.read(key)
            assert live is not None, address
            manifest = {k: v for k, v in live.manifest.items() if k != "status"}
            manifest["metadata"] = {k: v for k, v in manifest["metadata"].items() if k not in SERVER_METADATA}
            found[address] = manifest
    return found


def test_drift_is_remediated_and_a_rollback_restores_the_generation_before(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    _, kubeconfig, spec = started(cluster_factory, "lab", tmp_path, LAB_SPEC)
    adopted = gpuplan(kubeconfig, "import", "-f", str(spec), PLUGIN, HAND)
    assert adopted.returncode == 0, adopted.stderr
    applied(kubeconfig, spec)
    before = owned_objects(kubeconfig, tmp_path / "gpuplan.state.json")

    set_gfd_image(kubectl, kubeconfig, "nvcr.io/nvidia/k8s-device-plugin:v0.19.0")
    drift = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
    assert drift.returncode == 2, drift.stdout + drift.stderr
    findings = json.loads(drift.stdout)["findings"]
    assert [(f["kind"], f["address"]) for f in findings if f["kind"] == "changed"] == [("changed", GFD)], (
        findings
    )

    fixed = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--remediate", timeout=APPLY_TIMEOUT)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Remediated: the check that followed finds no drift." in fixed.stderr
    again = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
    assert again.returncode == 0, again.stdout + again.stderr
    no_changes(kubeconfig, spec)
    assert owned_objects(kubeconfig, tmp_path / "gpuplan.state.json") == before

    changed = LAB_SPEC.replace(
        "  devicePlugin:\n    version: v0.20.1\n",
        "  devicePlugin:\n    version: v0.20.0\n    env:\n      - {name: GPUPLAN_TEST, value: changed}\n",
    ).replace("  gfd:\n    version: v0.20.1\n", "  gfd:\n    version: v0.20.0\n")
    assert changed != LAB_SPEC
    spec.write_text(changed)
    applied(kubeconfig, spec)

    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert back.returncode == 0, back.stdout + back.stderr
    after = owned_objects(kubeconfig, tmp_path / "gpuplan.state.json")
    assert sorted(after) == sorted(before)
    for address, manifest in before.items():
        assert after[address] == manifest, (address, DeepDiff(manifest, after[address], verbose_level=2))
    spec.write_text(LAB_SPEC)
    no_changes(kubeconfig, spec)


# ------------------------------------------------------------------ (c) a takeover from the GPU Operator


HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
OWN_SHAPE = (
    HEADER + "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    "  devicePlugin: {version: v0.20.0}\n  gfd: {version: v0.20.0}\n"
)
OPERANDS = (
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
)
POLICY = ObjectKey("nvidia.com/v1", "ClusterPolicy", None, "cluster-policy")
OPERATOR = ObjectKey("apps/v1", "Deployment", NAMESPACE, "gpu-operator")


def operator_owns_its_operands(kubeconfig: Path) -> None:
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        policy = writer.read(POLICY)
        assert policy is not None, "the ClusterPolicy is back"
        operator = writer.read(OPERATOR)
        assert operator is not None and operator.manifest["spec"]["replicas"] == 1
        for name in OPERANDS:
            live = writer.read(ObjectKey("apps/v1", "DaemonSet", NAMESPACE, name))
            assert live is not None, name
            refs = live.metadata.get("ownerReferences") or []
            assert [(r["kind"], r["uid"]) for r in refs] == [("ClusterPolicy", policy.uid)], name
            assert "gpuplan.io/stack" not in live.labels, name


def gpuplan_owns_the_operands(kubeconfig: Path) -> None:
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        assert writer.read(POLICY) is None
        for name in OPERANDS:
            live = writer.read(ObjectKey("apps/v1", "DaemonSet", NAMESPACE, name))
            assert live is not None, name  # not collected with the ClusterPolicy it no longer names
            assert not live.metadata.get("ownerReferences"), name


def test_a_takeover_from_the_gpu_operator_and_back(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    """A spec of gpuplan's own shape: the operand pods restart and the operator is deleted, its operands
    outliving their ClusterPolicy (their owner references go first, or a real garbage collector would take
    them); the rollback gives everything back, the operator's Deployment and ClusterPolicy made again."""
    cluster, kubeconfig, spec = started(cluster_factory, "gpu-operator", tmp_path, OWN_SHAPE)
    took = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert took.returncode == 0, took.stdout + took.stderr
    assert "Deleted ClusterPolicy cluster-policy and Deployment gpu-operator/gpu-operator." in took.stdout
    assert cluster.wait_idle(60)
    gpuplan_owns_the_operands(kubeconfig)
    no_changes(kubeconfig, spec)
    drift = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--no-telemetry", "--no-status")
    assert drift.returncode == 0, drift.stdout + drift.stderr

    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve", timeout=APPLY_TIMEOUT)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "Returned to the GPU Operator" in back.stdout
    assert cluster.wait_idle(60)
    operator_owns_its_operands(kubeconfig)
    # the operator's again: the plan is the takeover's to make, and names the operator as the owner
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "(the GPU Operator (ClusterPolicy cluster-policy)) already runs devicePlugin" in " ".join(
        plan.stdout.split()
    )
