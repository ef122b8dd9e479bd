"""A team's state in the cluster and the in-cluster drift CronJob, on the built-in control plane and on a real
one (kube-apiserver with the Node,RBAC authorizers, etcd, the real Job and CronJob controllers and
scheduler, the GPU nodes simulated through the API).

The team story: two folders share one ``kubernetes://`` state; two applies started together both end well
(one holds the Lease, the other waits for it and finds nothing left to do), a run holding the lock makes the
next apply fail naming it, a holder killed with SIGKILL leaves a Lease the next apply takes over once it
expired; the state lives in a Secret the ``state`` commands read, and every folder's plan is clean.

The CronJob story: what ``gpuplan drift cronjob`` prints is applied, and a Job made from the CronJob (as
``kubectl create job --from=cronjob/...`` makes it: the real control plane has no way to run one now but
that) runs ``gpuplan drift report`` as a process of the pod, with the pod's ServiceAccount token, against the
API server as an in-cluster client finds it (``KUBERNETES_SERVICE_HOST``). Its exit code is the Job's
outcome and its verdict lands in the GPUStack's status (the real plane serves no pod logs); the account
reads the state without touching its Lease, and the authorizer refuses it everything the printed RBAC does
not grant.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from apply_process import gpuplan, gpuplan_command
from lab_stack import LAB_HEADER, LAB_SPEC
from team_state import holding
from test_drift_cronjob_cluster_state import ACCOUNT, STATE_OBJECTS, can, resource_version, run_job
from test_drift_cronjob_flow import exit_code

from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.testing import ClusterFactory, Kubectl, needs_sandbox

pytestmark = pytest.mark.slow

NAMESPACE = "gpu-operator"
HAND = "daemonset/nvidia-device-plugin-daemonset"
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"


def _state_section(name: str, lease_seconds: int = 60) -> str:
    return (
        f"  state: {{backend: kubernetes, namespace: {NAMESPACE}, name: {name}, "
        f"leaseDurationSeconds: {lease_seconds}}}\n"
    )


def _folder(root: Path, name: str, spec_text: str) -> Path:
    folder = root / name
    folder.mkdir()
    spec = folder / "gpustack.yaml"
    spec.write_text(spec_text)
    return spec


def _lab_cluster(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> tuple[Any, Path, Kubectl]:
    """The lab, with the namespace a cluster state needs and without the hand-deployed device plugin (whose
    import is another story's subject); its kubeconfig, and kubectl bound to it."""
    cluster = cluster_factory("lab")
    kubeconfig: Path = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    on_it: Kubectl = partial(kubectl, kubeconfig=kubeconfig)
    on_it("create", "namespace", NAMESPACE)
    on_it("delete", "-n", "kube-system", HAND)
    return cluster, kubeconfig, on_it


def _clean(kubeconfig: Path, spec: Path) -> None:
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes. The cluster matches the configuration." in plan.stdout


def _started(kubeconfig: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        gpuplan_command(kubeconfig, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _object(kubectl: Kubectl, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", "-n", NAMESPACE, kind, name, "-o", "json").stdout)
    return found


def test_a_team_shares_one_state_in_the_cluster_and_its_lease_orders_the_applies(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    cluster, kubeconfig, kubectl = _lab_cluster(cluster_factory, kubectl, tmp_path)
    team = f"kubernetes://{NAMESPACE}/team"
    spec_text = LAB_SPEC.rstrip("\n") + "\n" + _state_section("team")
    alice, bob = _folder(tmp_path, "alice", spec_text), _folder(tmp_path, "bob", spec_text)

    # two applies at once: one takes the Lease and applies, the other waits for it (the first one's apply
    # waits for every component's health: seconds) and then finds nothing left to do
    racing = [
        _started(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--lock-timeout", "4m")
        for spec in (alice, bob)
    ]
    outputs = [run.communicate(timeout=600) for run in racing]
    for run, (out, err) in zip(racing, outputs, strict=True):
        assert run.returncode == 0, out + err
    applied = [out for out, _ in outputs if "every changed component healthy" in out]
    idle = [out for out, _ in outputs if "No changes" in out]
    assert len(applied) == 1 and len(idle) == 1, outputs
    for spec in (alice, bob):
        _clean(kubeconfig, spec)
        assert not (spec.parent / "gpuplan.state.json").exists(), "the state is in the cluster, not beside it"

    # the state is a Secret of the cluster, which the state commands read
    serial = int(
        _object(kubectl, "secret", "gpuplan-state-team")["metadata"]["annotations"]["gpuplan.io/serial"]
    )
    pulled = gpuplan(kubeconfig, "state", "pull", "--state", team)
    assert pulled.returncode == 0 and json.loads(pulled.stdout)["serial"] == serial, pulled.stderr
    listed = gpuplan(kubeconfig, "state", "list", "--state", team)
    assert listed.returncode == 0 and f"{PLUGIN}\n" in listed.stdout, listed.stderr

    # a run holding the lock: the next apply fails naming it
    with holding(kubeconfig, team) as holder:
        refused = gpuplan(kubeconfig, "apply", "-f", str(bob), "--auto-approve")
        assert refused.returncode == 1
        assert f"Error: {team}: state is locked by pid {holder.pid}" in refused.stderr
        assert f"force-unlock {holder.lock_id}" in refused.stderr
        assert holder.release() == 0

    # a holder killed with SIGKILL renews its Lease no more: the next apply waits for its expiry and takes it
    with holding(kubeconfig, team, lease_seconds=3) as killed:
        os.kill(killed.pid, signal.SIGKILL)
        killed.process.wait(timeout=60)
        took = gpuplan(kubeconfig, "apply", "-f", str(alice), "--auto-approve", "--lock-timeout", "1m")
    assert took.returncode == 0, took.stdout + took.stderr
    assert f"Note: took over the state lock held by pid {killed.pid}" in took.stderr
    assert "No changes" in took.stdout
    lease = _object(kubectl, "lease", "gpuplan-lock-team")
    assert "holderIdentity" not in lease["spec"], "the apply let go of the Lease it took over"
    _clean(kubeconfig, bob)
    assert cluster.wait_idle(60)


def _run_job(kubectl: Kubectl, job: str, condition: str) -> int:
    """A Job made from the CronJob, waited for until ``condition``; its container's exit code."""
    run_job(kubectl, job, condition)
    return exit_code(kubectl, job)


def _drifted(kubectl: Kubectl) -> str:
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Drifted')].status}"
    return str(kubectl("get", "gpustack", "lab", "-o", jsonpath).stdout)


@needs_sandbox()
def test_the_drift_cronjob_runs_its_report_in_the_cluster_with_least_privilege(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    cluster, kubeconfig, kubectl = _lab_cluster(cluster_factory, kubectl, tmp_path)
    spec = _folder(tmp_path, "ops", LAB_HEADER + _state_section("lab"))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    _clean(kubeconfig, spec)

    printed = gpuplan(kubeconfig, "drift", "cronjob", "-f", str(spec))
    assert printed.returncode == 0, printed.stderr
    documents = [doc for doc in yaml.safe_load_all(printed.stdout) if doc]
    cron = next(doc for doc in documents if doc["kind"] == "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"][:5] == ["gpuplan", "drift", "report", "-f", "/etc/gpuplan/gpustack.yaml"]
    assert all("secret" not in volume for volume in pod["volumes"]), (
        "the job reads the state from the cluster"
    )
    kubectl("apply", "-f", "-", input=printed.stdout)  # kubectl's default validation
    stored = [resource_version(kubectl, kind, name) for kind, name in STATE_OBJECTS]

    # a run now: the report finds no drift, exits 0, completes the Job and says so in the GPUStack status
    assert _run_job(kubectl, "drift-clean", "Complete") == 0
    assert _drifted(kubectl) == "False"
    assert [resource_version(kubectl, kind, name) for kind, name in STATE_OBJECTS] == stored, (
        "the report neither writes the state nor takes its Lease"
    )

    # a changed image: the report exits 2, which fails the Job, and the status says Drifted
    kubectl("set", "image", "-n", NAMESPACE, HAND, "nvidia-device-plugin=registry.example.com/plugin:v0")
    assert _run_job(kubectl, "drift-image", "Failed") == 2
    assert _drifted(kubectl) == "True"

    # what the authorizer lets the job's account do, and no more
    kubectl("-n", NAMESPACE, "create", "secret", "generic", "other", "--from-literal=token=x")
    assert can(kubectl, "get", "secret/gpuplan-state-lab")
    assert not can(kubectl, "get", "secret/other")
    assert not can(kubectl, "list", "secrets")
    for verb in ("update", "patch", "delete"):
        assert not can(kubectl, verb, "secret/gpuplan-state-lab")
    for verb in ("get", "update", "create"):
        assert not can(kubectl, verb, "leases.coordination.k8s.io/gpuplan-lock-lab")
    assert can(kubectl, "patch", "gpustacks.gpuplan.io/lab", "--subresource=status")
    assert not can(kubectl, "patch", "gpustacks.gpuplan.io/lab"), "the status only, not the object"

    # the printed role less its apps rule: the report as that account is refused, in the server's words
    role = next(doc for doc in documents if doc["kind"] == "ClusterRole")
    role["rules"] = [rule for rule in role["rules"] if "apps" not in rule.get("apiGroups", [])]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    token = kubectl("create", "token", "gpuplan-drift", "-n", NAMESPACE).stdout.strip()
    limited = write_kubeconfig(tmp_path / "sa-kubeconfig", cluster.url, token, ca_pem=cluster.ca_pem)
    refused = gpuplan(limited, "drift", "report", "-f", str(spec), "--format", "json")
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert lines[0] == "Error: list DaemonSet: the cluster says the user is not allowed (403)", refused.stderr
    assert lines[1].endswith(
        f'daemonsets.apps is forbidden: User "{ACCOUNT}" cannot list resource "daemonsets" '
        'in API group "apps" at the cluster scope'
    )
