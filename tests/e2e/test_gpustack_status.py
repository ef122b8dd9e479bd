"""The stack's status in the cluster (design §7.3) on the simulated lab, read with the real kubectl: `kubectl
get gpustacks` says READY True after an apply; DRIFTED True after `kubectl set image` on gpuplan's device
plugin and a drift report; READY True and DRIFTED False again after `drift report --remediate`, whose plan
is in the plan log (a plan with other changes, or a disruptive one without --allow-disruptive, is refused);
a status write the user may not make is a Warning: and the apply still succeeds; a rollback writes the status
too. The user without the permission is a ServiceAccount's token: gpuplan's client does not impersonate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_stack import LAB_SPEC

from gpuplan.cli import run
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

PLUGIN_DS = "nvidia-device-plugin-daemonset"
NAMESPACE = "gpu-operator"


@pytest.fixture
def spec(tmp_path: Path, kubectl: Kubectl) -> Path:
    kubectl("delete", "daemonset", "-n", "kube-system", PLUGIN_DS)  # the lab's hand-deployed plugin
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    return path


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def columns(kubectl: Kubectl) -> dict[str, str]:
    header, row = (line.split() for line in kubectl("get", "gpustacks").stdout.strip().splitlines())
    return dict(zip(header, row))


def status(kubectl: Kubectl) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", "gpustack", "lab", "-o", "json").stdout)["status"]
    return found


def condition(kubectl: Kubectl, kind: str) -> dict[str, Any]:
    return next(c for c in status(kubectl)["conditions"] if c["type"] == kind)


def test_apply_drift_and_remediation_show_in_kubectl_get_gpustacks(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    capsys.readouterr()
    row = columns(kubectl)
    assert list(row) == ["NAME", "READY", "DRIFTED", "SERIAL", "AGE"]
    serial = json.loads((spec.parent / "gpuplan.state.json").read_text())["serial"]
    assert (row["NAME"], row["READY"], row["DRIFTED"], row["SERIAL"]) == (
        "lab",
        "True",
        "Unknown",
        str(serial),
    )
    applied = status(kubectl)
    assert applied["components"]["devicePlugin"] == {
        "owner": "gpuplan",
        "version": "v0.20.1",
        "nodesReady": 1,
        "nodesDesired": 1,
    }
    assert applied["components"]["driver"] == {"owner": "external", "version": "580.105.08"}
    assert applied["lastApplied"]["operation"] == "apply" and "@" in applied["lastApplied"]["by"]

    kubectl(
        "set",
        "image",
        "-n",
        NAMESPACE,
        f"daemonset/{PLUGIN_DS}",
        "nvidia-device-plugin=nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    assert gp(kubeconfig, "drift", "report", "-f", str(spec)) == 2
    capsys.readouterr()
    assert columns(kubectl)["DRIFTED"] == "True"
    drifted = condition(kubectl, "Drifted")
    assert drifted["reason"] == "DriftFound" and "devicePlugin: 1 changed" in drifted["message"]
    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json") == 2
    again = condition(kubectl, "Drifted")  # written again, still True: its transition time stays
    assert again["lastTransitionTime"] == drifted["lastTransitionTime"]
    described = kubectl("describe", "gpustack", "lab").stdout
    assert "devicePlugin: 1 changed" in described and "Nodes Desired" in described

    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--remediate") == 0
    err = capsys.readouterr().err
    assert "Remediated: the check that followed finds no drift." in err, err
    row = columns(kubectl)
    assert (row["READY"], row["DRIFTED"]) == ("True", "False")
    assert condition(kubectl, "Drifted")["reason"] == "NoDrift"
    assert status(kubectl)["lastApplied"]["operation"] == "remediate"
    image = kubectl(
        "get", "ds", "-n", NAMESPACE, PLUGIN_DS, "-o", "jsonpath={.spec.template.spec.containers[0].image}"
    ).stdout
    assert image == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    log = json.loads(
        kubectl("get", "configmap", "-n", NAMESPACE, "gpuplan-plan-log-lab", "-o", "json").stdout
    )
    [entry] = [json.loads(text) for text in log["data"].values()]
    [change] = [c for c in entry["plan"]["changes"] if c["action"] != "no-op"]
    assert change["address"] == f"devicePlugin/DaemonSet/{NAMESPACE}/{PLUGIN_DS}"
    assert change["reason"] == "UPDATE_BECAUSE_DRIFT" and entry["outcome"] == "applied"


def test_remediation_refuses_unapplied_spec_changes(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    kubectl(
        "set",
        "image",
        "-n",
        NAMESPACE,
        f"daemonset/{PLUGIN_DS}",
        "nvidia-device-plugin=nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    spec.write_text(
        LAB_SPEC.replace(
            "dcgmExporter:\n    version: 4.6.0-4.8.3-distroless",
            "dcgmExporter:\n    version: 4.4.1-4.5.2-distroless",
        )
    )
    capsys.readouterr()
    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--remediate") == 1
    err = capsys.readouterr().err
    assert "Error: --remediate only reverses drift" in err, err
    assert "gpuplan-plan-log-lab" not in kubectl("get", "configmap", "-n", NAMESPACE).stdout


def test_a_forbidden_status_write_is_a_warning_and_the_apply_succeeds(
    lab_sim: Simulator, spec: Path, kubectl: Kubectl, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = [
        "",
        "apps",
        "rbac.authorization.k8s.io",
        "node.k8s.io",
        "apiextensions.k8s.io",
        "policy",
        "nvidia.com",
        "discovery.k8s.io",
        "coordination.k8s.io",
        "batch",
        "events.k8s.io",
    ]
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "applier", "namespace": "default"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "everything-but-gpustacks"},
            "rules": [{"apiGroups": groups, "resources": ["*"], "verbs": ["*"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "applier"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "everything-but-gpustacks",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "applier", "namespace": "default"}],
        },
    ]
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    token = kubectl("create", "token", "applier", "-n", "default").stdout.strip()
    limited = write_kubeconfig(tmp_path / "applier.kubeconfig", lab_sim.url, token, ca_pem=lab_sim.ca_pem)
    assert gp(limited, "apply", "-f", str(spec), "--auto-approve") == 0
    err = capsys.readouterr().err
    [warning] = [line for line in err.splitlines() if line.startswith("Warning:")]
    assert "GPUStack lab's status was not written" in warning and "forbidden" in warning, err
    assert "Error:" not in err
    assert "No resources found" in kubectl("get", "gpustacks").stderr


def test_rollback_writes_the_status(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    spec.write_text(
        LAB_SPEC.replace("devicePlugin:\n    version: v0.20.1", "devicePlugin:\n    version: v0.17.0")
    )
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    assert status(kubectl)["components"]["devicePlugin"]["version"] == "v0.17.0"
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 0
    after = status(kubectl)
    serial = json.loads((spec.parent / "gpuplan.state.json").read_text())["serial"]
    assert after["serial"] == serial and after["lastApplied"]["operation"] == "rollback"
    assert after["components"]["devicePlugin"]["version"] == "v0.20.1"
    ready = condition(kubectl, "Ready")
    assert ready["status"] == "True" and ready["reason"] == "RolledBack"


def test_a_disruptive_remediation_needs_allow_disruptive(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan whose change would disrupt running work (as a driver restart does) is refused, nothing changed;
    --allow-disruptive applies it."""
    from gpuplan.planner.drift import remediation

    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    kubectl(
        "set",
        "image",
        "-n",
        NAMESPACE,
        f"daemonset/{PLUGIN_DS}",
        "nvidia-device-plugin=nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    monkeypatch.setattr(remediation, "disruptive", remediation.changes)  # every change disrupts
    capsys.readouterr()
    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--remediate") == 1
    err = capsys.readouterr().err
    assert "Error: reversing the drift would disrupt running work: update devicePlugin/DaemonSet/" in err, err
    assert "--allow-disruptive" in err
    image = kubectl(
        "get", "ds", "-n", NAMESPACE, PLUGIN_DS, "-o", "jsonpath={.spec.template.spec.containers[0].image}"
    ).stdout
    assert image.endswith(":v0.17.0")
    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--remediate", "--allow-disruptive") == 0
