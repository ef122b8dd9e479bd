"""A driver rollout whose new pods the API server refuses fails at once on both control planes, with the
server's words, not at the node's health timeout: a driver upgrade together with a PriorityClass that does
not exist (``daemonsets.priorityClassName``). The Priority admission plugin refuses every pod the
DaemonSet controller makes from the new template, and the controller says so in a ``FailedCreate`` Warning
Event on the DaemonSet (``Error creating: ...``, RealPodControl.createPods,
pkg/controller/controller_utils.go). The rollback restores the old DaemonSet and the old driver on the node,
and the old spec plans clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import STACK_HEADER
from test_day2_both_planes import (
    APPLY_TIMEOUT,
    DRIVER_LABEL,
    NAMESPACE,
    NEW,
    NODES,
    OLD,
    applied,
    driver_images,
    get_json,
    no_changes,
    node_labels,
    started,
)

from gpuplan.sim.testing import ClusterFactory, Kubectl

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.timeout(600)]

HOUR = 3600
MISSING = "gpu-critical-missing"
DRIVER_DS = "nvidia-driver-daemonset"


def spec_text(version: str, priority_class: str | None = None) -> str:
    """The day-2 stack with the driver at ``version``; a node's health timeout of an hour, so a failure
    that comes in a test's time came from a judgement, not from the timeout."""
    daemonsets = f"  daemonsets: {{priorityClassName: {priority_class}}}\n" if priority_class else ""
    return (
        STACK_HEADER
        + daemonsets
        + (
            f'  driver:\n    version: "{version}"\n    healthTimeoutSeconds: {HOUR}\n'
            "  toolkit: {}\n"
            "  devicePlugin: {version: v0.20.1}\n"
            "  gfd: {version: v0.20.1}\n"
            "  validator: {}\n"
        )
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_driver_pods_the_api_server_refuses_fail_the_rollout_at_once_with_its_reason(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    _, kubeconfig, spec = started(cluster_factory, "upgrade4", tmp_path, spec_text(OLD))
    applied(kubeconfig, spec)
    assert node_labels(kubectl, kubeconfig, DRIVER_LABEL) == dict.fromkeys(NODES, OLD)

    spec.write_text(spec_text(NEW, MISSING))
    done = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json", timeout=APPLY_TIMEOUT)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    found = events(done.stdout)
    [errored] = [e for e in found if e["type"] == "change_errored" and e["reason"] != "Stopped"]
    assert errored["address"].startswith("driver/DaemonSet/"), errored
    assert errored["reason"] == "FailedCreate", errored
    # the server's own words, as the DaemonSet controller recorded them (the same Event on both planes)
    refusal = (
        f'Error creating: pods "{DRIVER_DS}-" is forbidden: no PriorityClass with name {MISSING} was found'
    )
    assert errored["message"].startswith(
        f"{errored['address']} at the driver-rollout gate: driver rollout stopped at node gpu-node-1 "
        f"(FailedCreate): gpu-node-1: the DaemonSet controller cannot create the driver pod of {DRIVER_DS}: "
        + refusal
    ), errored
    assert "Rolled back" in done.stderr, done.stderr
    [event] = get_json(
        kubectl,
        kubeconfig,
        "events",
        "-n",
        NAMESPACE,
        "--field-selector",
        f"involvedObject.kind=DaemonSet,involvedObject.name={DRIVER_DS},reason=FailedCreate",
    )["items"]
    assert (event["type"], event["source"], event["message"]) == (
        "Warning",
        {"component": "daemonset-controller"},
        refusal,
    )

    # the old DaemonSet, and the old driver on every node, none left cordoned
    driver = get_json(kubectl, kubeconfig, "daemonset", "-n", NAMESPACE, "nvidia-driver-daemonset")
    template = driver["spec"]["template"]["spec"]
    assert template["priorityClassName"] == "system-node-critical"
    assert template["containers"][0]["image"] == f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"
    assert driver_images(kubectl, kubeconfig) == dict.fromkeys(
        NODES, f"nvcr.io/nvidia/driver:{OLD}-ubuntu24.04"
    )
    assert node_labels(kubectl, kubeconfig, DRIVER_LABEL) == dict.fromkeys(NODES, OLD)
    assert not any(n["spec"].get("unschedulable") for n in get_json(kubectl, kubeconfig, "nodes")["items"])

    spec.write_text(spec_text(OLD))
    no_changes(kubeconfig, spec)
