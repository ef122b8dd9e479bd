"""The in-cluster drift report, as docs/drift.md tells a user to set it up, end to end on the simulator.

The state Secret is made with `kubectl create secret generic`, what `gpuplan drift cronjob` prints is applied
with kubectl's default validation, and the CronJob runs: on its schedule (the simulator's batch clock moved
past it) and at once with `kubectl create job --from=cronjob/...`. Its pod runs gpuplan's own image, which
the simulated kubelet runs as a real `gpuplan drift report` process with the pod's service account (whose
RBAC is what the printed ClusterRole grants), the spec from the ConfigMap and the state from the Secret. Exit
0 completes the Job; drift (exit 2) fails it, and `kubectl logs` shows the report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_drift_lab import LAB_SPEC, put_stack_in_place

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, needs_sandbox

pytestmark = needs_sandbox()
NAMESPACE = "gpu-operator"


def gpuplan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True, timeout=120, check=False
    )


def jobs(sim: Simulator) -> list[dict[str, Any]]:
    listed = sim.store.list(sim.store.registry.for_kind("batch/v1", "Job"), namespace=NAMESPACE).items
    return sorted(listed, key=lambda job: job["metadata"]["creationTimestamp"] + job["metadata"]["name"])


def finished(job: dict[str, Any]) -> str | None:
    """Complete or Failed, once the Job controller says so."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


def report_of(kubectl: Kubectl, job: str) -> dict[str, Any]:
    text = kubectl("logs", "-n", NAMESPACE, f"job/{job}").stdout
    # the pod's log holds its stderr too (a Warning line may follow the document)
    document: dict[str, Any] = json.JSONDecoder().raw_decode(text, text.index("{"))[0]
    return document


def exit_code(kubectl: Kubectl, job: str) -> int:
    pods = json.loads(kubectl("get", "pods", "-n", NAMESPACE, "-l", f"job-name={job}", "-o", "json").stdout)
    [pod] = pods["items"]
    return int(pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"])


def test_the_drift_cronjob_runs_on_schedule_and_by_hand_and_fails_its_job_on_drift(
    lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, tmp_path: Path
) -> None:
    spec_file = put_stack_in_place(kubeconfig, tmp_path, LAB_SPEC)
    state = tmp_path / "gpuplan.state.json"
    kubectl(
        "-n",
        NAMESPACE,
        "create",
        "secret",
        "generic",
        "gpuplan-state",
        f"--from-file=gpuplan.state.json={state}",
    )
    printed = gpuplan("drift", "cronjob", "-f", str(spec_file), "--schedule", "*/10 * * * *")
    assert printed.returncode == 0, printed.stderr
    kubectl("apply", "-f", "-", input=printed.stdout)  # default validation: no --validate=false

    # on its schedule: the clock past the next */10 minute makes one Job, which finds no drift
    lab_sim.advance_batch_clock(600)
    assert lab_sim.wait_for(lambda: len(jobs(lab_sim)) == 1 and finished(jobs(lab_sim)[0]) is not None, 120)
    scheduled = jobs(lab_sim)[0]["metadata"]["name"]
    assert scheduled.startswith("gpuplan-drift-")
    assert finished(jobs(lab_sim)[0]) == "Complete", kubectl(
        "logs", "-n", NAMESPACE, f"job/{scheduled}"
    ).stdout
    assert exit_code(kubectl, scheduled) == 0
    assert report_of(kubectl, scheduled)["drift"] is False

    # a manual change, then a run by hand: drift, exit 2, the Job failed, the finding in the log
    kubectl("delete", "-n", NAMESPACE, "service/nvidia-dcgm-exporter")
    kubectl("-n", NAMESPACE, "create", "job", "drift-now", "--from=cronjob/gpuplan-drift")
    kubectl("wait", "-n", NAMESPACE, "--for=condition=Failed", "job/drift-now", "--timeout=120s")
    assert exit_code(kubectl, "drift-now") == 2
    report = report_of(kubectl, "drift-now")
    assert report["drift"] is True
    assert any(
        "Service/gpu-operator/nvidia-dcgm-exporter" in str(finding.get("address"))
        for finding in report["findings"]
    ), report["findings"]
