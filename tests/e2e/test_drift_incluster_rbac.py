"""The RBAC that `gpuplan drift cronjob` prints is what `gpuplan drift report` needs: the report run as the
CronJob's ServiceAccount (a kubeconfig with its token, as in the pod) against the simulator, whose API server
authorizes every request of a non-admin user as the RBAC authorizer does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from test_drift_lab import LAB_SPEC, put_stack_in_place

from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

NAME = "gpuplan-drift"
NAMESPACE = "gpu-operator"


def gpuplan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True, timeout=120, check=False
    )


def service_account_kubeconfig(sim: Simulator, kubectl: Kubectl, path: Path) -> Path:
    token = kubectl("create", "token", NAME, "-n", NAMESPACE).stdout.strip()
    return write_kubeconfig(path, sim.url, token, ca_pem=sim.ca_pem)


def test_the_printed_rbac_is_enough_for_the_report_and_one_rule_less_is_a_403(
    lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec_file = put_stack_in_place(kubeconfig, tmp_path, LAB_SPEC)
    printed = gpuplan("drift", "cronjob", "-f", str(spec_file))
    assert printed.returncode == 0, printed.stderr
    kubectl("apply", "-f", "-", input=printed.stdout)
    config = service_account_kubeconfig(lab_sim, kubectl, tmp_path / "sa-kubeconfig")
    report = ["--kubeconfig", str(config), "drift", "report", "-f", str(spec_file), "--format", "json"]
    allowed = gpuplan(*report)
    assert allowed.returncode in (0, 2), allowed.stderr
    assert json.loads(allowed.stdout)["findings"] is not None
    assert "Warning:" not in allowed.stderr, allowed.stderr  # the printed role may write the GPUStack status
    assert kubectl("get", "gpustack", "lab", "-o", "jsonpath={.status.lastChecked}").stdout

    role = next(doc for doc in yaml.safe_load_all(printed.stdout) if doc["kind"] == "ClusterRole")
    role["rules"] = [rule for rule in role["rules"] if "apps" not in rule.get("apiGroups", [])]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    refused = gpuplan(*report)
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert lines[0] == "Error: list DaemonSet: the cluster says the user is not allowed (403)"
    assert lines[1].endswith(
        'daemonsets.apps is forbidden: User "system:serviceaccount:gpu-operator:gpuplan-drift" cannot list '
        'resource "daemonsets" in API group "apps" at the cluster scope'
    )
