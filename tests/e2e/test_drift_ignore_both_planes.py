"""Drift on a fleet, on the built-in control plane and on a real one: a hand ``kubectl set image`` on GFD's
DaemonSet is one finding listing the nodes it reaches; a ``spec.ignore`` rule for it shows it as ignored and
neither the report nor the plan exits 2; without the rule ``--remediate`` puts it back; a hand
``nvidia.com/mig.config`` label on a MIG node is remediated too. After each step the plan says
"No changes"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import full_lab_spec
from test_day2_both_planes import (
    APPLY_TIMEOUT,
    GFD,
    NAMESPACE,
    applied,
    get_json,
    no_changes,
    set_gfd_image,
    started,
)

from gpuplan.sim.testing import ClusterFactory, Kubectl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

POOL = "node.kubernetes.io/pool"
MIG_CONFIG = "nvidia.com/mig.config"
HAND_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"
SPEC = full_lab_spec(
    mig="{strategy: mixed}",
    migManager="{owner: gpuplan}",
    nodePools=f"[{{name: training, nodeSelector: {{{POOL}: a100}}, mig: {{config: all-1g.10gb}}}}]",
)
RULE = f"  ignore:\n    - address: {GFD}\n      paths: [spec.template.spec.containers]\n"


def report(kubeconfig: Path, spec: Path) -> tuple[int, dict[str, Any]]:
    done = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json", "--no-telemetry")
    assert done.returncode in (0, 2), done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, document


def gfd_image(kubectl: Kubectl, kubeconfig: Path) -> str:
    daemonset = get_json(kubectl, kubeconfig, "daemonset", "-n", NAMESPACE, "gpu-feature-discovery")
    return str(daemonset["spec"]["template"]["spec"]["containers"][0]["image"])


def remediated(kubeconfig: Path, spec: Path, *args: str) -> None:
    fixed = gpuplan(
        kubeconfig,
        "drift",
        "report",
        "-f",
        str(spec),
        "--remediate",
        "--no-telemetry",
        *args,
        timeout=APPLY_TIMEOUT,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    code, document = report(kubeconfig, spec)
    assert code == 0 and document["findings"] == [], document["findings"]
    no_changes(kubeconfig, spec)


def test_one_finding_per_hand_change_an_ignore_rule_and_remediation_on_a_fleet(
    cluster_factory: ClusterFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    cluster, kubeconfig, spec = started(cluster_factory, "fleet-24", tmp_path, SPEC)
    applied(kubeconfig, spec)
    nodes = sorted(n["metadata"]["name"] for n in get_json(kubectl, kubeconfig, "nodes")["items"])
    assert len(nodes) == 24

    set_gfd_image(kubectl, kubeconfig, HAND_IMAGE)
    # the report after the hand change's rollout (the real controller paces it node by node)
    kubectl(
        "rollout",
        "status",
        "-n",
        "gpu-operator",
        "daemonset/gpu-feature-discovery",
        "--timeout=300s",
        kubeconfig=kubeconfig,
    )
    assert cluster.wait_idle(APPLY_TIMEOUT)
    code, document = report(kubeconfig, spec)
    assert code == 2
    gfd = [f for f in document["findings"] if f["component"] == "gfd"]
    assert len(gfd) == 1, gfd
    [finding] = gfd
    assert (finding["kind"], finding["address"], finding["nodes"]) == ("changed", GFD, nodes)
    assert "reaches 24 node(s)" in finding["detail"]
    assert document["summary"]["total"] == 1, document["findings"]
    assert {n["components"]["gfd"]["status"] for n in document["nodes"]} == {"drifted"}, "the table agrees"

    spec.write_text(SPEC + RULE)
    code, document = report(kubeconfig, spec)
    assert code == 0 and document["findings"] == [], document["findings"]
    [ignored] = document["ignored"]
    assert (ignored["address"], ignored["nodes"]) == (GFD, nodes)
    assert {n["components"]["gfd"]["status"] for n in document["nodes"]} == {"ok"}
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "Ignored (spec.ignore)" in plan.stdout and HAND_IMAGE in plan.stdout
    kept = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--remediate", "--no-telemetry")
    assert kept.returncode == 0 and "No drift" in kept.stdout, kept.stdout + kept.stderr
    assert gfd_image(kubectl, kubeconfig) == HAND_IMAGE, "--remediate leaves what spec.ignore declares"

    spec.write_text(SPEC)
    remediated(kubeconfig, spec)
    assert gfd_image(kubectl, kubeconfig) != HAND_IMAGE

    a100 = sorted(
        n["metadata"]["name"] for n in get_json(kubectl, kubeconfig, "nodes", "-l", f"{POOL}=a100")["items"]
    )[0]
    kubectl("label", "node", a100, f"{MIG_CONFIG}=all-disabled", "--overwrite", kubeconfig=kubeconfig)
    code, document = report(kubeconfig, spec)
    assert code == 2
    assert len(document["findings"]) == 1, document["findings"]
    [label] = document["findings"]
    assert (label["kind"], label["component"], label["node"]) == ("changed", "migManager", a100)
    # the mig-manager repartitions the node's GPUs to put the config back: disruptive, so it takes leave
    remediated(kubeconfig, spec, "--allow-disruptive")
    node = get_json(kubectl, kubeconfig, "node", a100)
    assert node["metadata"]["labels"][MIG_CONFIG] == "all-1g.10gb"
