"""PodDisruptionBudgets through the real API: made with kubectl, kept by the simulated disruption
controller, printed by `kubectl get pdb`, and honoured by pods/eviction for the official Python client and
for `kubectl drain`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

pytestmark = pytest.mark.kubectl


def _web_pods(sim: Simulator, count: int) -> None:
    rt = sim.store.registry.for_kind("v1", "Pod")
    for i in range(count):
        body = {
            "metadata": {"name": f"web-{i}", "labels": {"app": "web"}},
            "spec": {"nodeName": "lab-node", "containers": [{"name": "c", "image": "busybox:1.36"}]},
        }
        sim.store.create(rt, body, namespace="default", manager="test")


def _pdb_status(sim: Simulator) -> dict[str, Any]:
    rt = sim.store.registry.for_kind("policy/v1", "PodDisruptionBudget")
    status: dict[str, Any] = sim.store.get(rt, "default", "web").get("status") or {}
    return status


@pytest.fixture
def budget(lab_sim: Simulator, kubectl: Kubectl) -> Simulator:
    """Two ready web pods on the lab node under `minAvailable: 1`, made by kubectl's generator."""
    _web_pods(lab_sim, 2)
    kubectl("create", "poddisruptionbudget", "web", "--selector=app=web", "--min-available=1")
    assert lab_sim.wait_for(lambda: _pdb_status(lab_sim).get("currentHealthy") == 2, 30)
    return lab_sim


def test_kubectl_gets_the_budget_the_controller_keeps(budget: Simulator, kubectl: Kubectl) -> None:
    out = kubectl("get", "pdb").stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "MIN",
        "AVAILABLE",
        "MAX",
        "UNAVAILABLE",
        "ALLOWED",
        "DISRUPTIONS",
        "AGE",
    ]
    assert out[1].split()[:4] == ["web", "1", "N/A", "1"]
    status = json.loads(kubectl("get", "pdb", "web", "-o", "json").stdout)["status"]
    assert {
        k: status[k] for k in ("expectedPods", "desiredHealthy", "currentHealthy", "disruptionsAllowed")
    } == {
        "expectedPods": 2,
        "desiredHealthy": 1,
        "currentHealthy": 2,
        "disruptionsAllowed": 1,
    }


def test_the_python_client_evicts_one_pod_and_is_refused_the_second(
    budget: Simulator, kubeconfig: Path
) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api_client)

        def evict(name: str) -> Any:
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))
            return core.create_namespaced_pod_eviction(name, "default", body)

        evict("web-0")
        assert budget.wait_for(lambda: _pdb_status(budget).get("expectedPods") == 1, 30)
        with pytest.raises(ApiException) as refused:
            evict("web-1")
        assert refused.value.status == 429
        body = json.loads(refused.value.body)
        assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
        assert body["details"]["causes"] == [
            {
                "reason": "DisruptionBudget",  # metav1.StatusCause.Type is json "reason"
                "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
            }
        ]
        pdb = client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget_status("web", "default")
        assert pdb.status.disruptions_allowed == 0
        assert [(c.type, c.status, c.reason) for c in pdb.status.conditions] == [
            ("DisruptionAllowed", "False", "InsufficientPods")
        ]
    finally:
        api_client.close()


def test_kubectl_drain_evicts_what_the_budget_allows_and_retries_the_rest(
    budget: Simulator, kubectl: Kubectl
) -> None:
    drained = kubectl(
        "drain",
        "lab-node",
        "--pod-selector=app=web",
        "--ignore-daemonsets",
        "--force",
        "--timeout=3s",
        check=False,
    )
    assert drained.returncode != 0
    assert (
        "(will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."
        in drained.stderr
    )
    assert "global timeout reached: 3s" in drained.stderr
    rt = budget.store.registry.for_kind("v1", "Pod")
    left = [p["metadata"]["name"] for p in budget.store.list(rt, namespace="default").items]
    assert len(left) == 1  # both evictions raced for the one disruption allowed; one pod stays
    kubectl("uncordon", "lab-node")
