"""A Service's Endpoints and EndpointSlices and the service proxy, through the real kubectl, on the lab after
the GPU Operator's operands are applied (tests/sim/e2e/manifests/, as test_lab.py applies them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

MANIFESTS = Path(__file__).parent / "manifests"
DEPLOY = ["device-plugin", "gpu-feature-discovery", "dcgm-exporter", "operator-validator"]
NS = "gpu-operator"
SERVICE = "nvidia-dcgm-exporter"
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
PROXY = f"/api/v1/namespaces/{NS}/services/{{service}}/proxy/metrics"

pytestmark = pytest.mark.kubectl


@pytest.fixture
def operator_lab(lab_sim: Simulator, kubectl: Kubectl) -> Simulator:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    kubectl("label", "node", "lab-node", *[f"nvidia.com/gpu.deploy.{c}=true" for c in DEPLOY])
    kubectl("apply", "-f", str(MANIFESTS))
    assert lab_sim.wait_idle(30)
    return lab_sim


def get_json(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def exporter_pod(kubectl: Kubectl) -> dict[str, Any]:
    pods = get_json(kubectl, "pods", "-n", NS, "-l", "app=nvidia-dcgm-exporter")["items"]
    assert len(pods) == 1
    pod: dict[str, Any] = pods[0]
    return pod


def test_the_endpoints_list_the_ready_exporter(operator_lab: Simulator, kubectl: Kubectl) -> None:
    pod = exporter_pod(kubectl)
    service = get_json(kubectl, "service", "-n", NS, SERVICE)
    endpoints = get_json(kubectl, "endpoints", "-n", NS, SERVICE)
    assert endpoints["metadata"]["labels"] == {
        "app": "nvidia-dcgm-exporter",
        "endpoints.kubernetes.io/managed-by": "endpoint-controller",
    }
    trigger = endpoints["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"]
    assert trigger >= service["metadata"]["creationTimestamp"]
    assert endpoints["subsets"] == [
        {
            "addresses": [
                {
                    "ip": pod["status"]["podIP"],
                    "nodeName": "lab-node",
                    "targetRef": {
                        "kind": "Pod",
                        "name": pod["metadata"]["name"],
                        "namespace": NS,
                        "uid": pod["metadata"]["uid"],
                    },
                }
            ],
            "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP"}],
        }
    ]
    table = kubectl("get", "endpoints", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "ENDPOINTS", "AGE"]
    assert table[1].split()[:2] == [SERVICE, f"{pod['status']['podIP']}:9400"]
    described = kubectl("describe", "service", "-n", NS, SERVICE).stdout.splitlines()
    assert [line.split() for line in described if line.startswith("Endpoints:")] == [
        ["Endpoints:", f"{pod['status']['podIP']}:9400"]
    ]


def test_the_endpointslice_is_the_controllers(operator_lab: Simulator, kubectl: Kubectl) -> None:
    pod = exporter_pod(kubectl)
    service = get_json(kubectl, "service", "-n", NS, SERVICE)
    found = get_json(kubectl, "endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name={SERVICE}")
    [slice_obj] = found["items"]
    meta = slice_obj["metadata"]
    assert meta["generateName"] == f"{SERVICE}-" and meta["name"].startswith(f"{SERVICE}-")
    assert meta["labels"] == {
        "app": "nvidia-dcgm-exporter",
        "kubernetes.io/service-name": SERVICE,
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "name": SERVICE,
            "uid": service["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert slice_obj["addressType"] == "IPv4"
    assert slice_obj["ports"] == [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP"}]
    assert slice_obj["endpoints"] == [
        {
            "addresses": [pod["status"]["podIP"]],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": "lab-node",
            "targetRef": {
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "namespace": NS,
                "uid": pod["metadata"]["uid"],
            },
        }
    ]
    table = kubectl("get", "endpointslices", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert table[1].split()[:4] == [meta["name"], "IPv4", "9400", pod["status"]["podIP"]]


def test_a_pod_that_is_not_ready_moves_to_not_ready_addresses(
    operator_lab: Simulator, kubectl: Kubectl
) -> None:
    operator_lab.set_image_fault(EXPORTER_IMAGE, "CrashLoopBackOff")
    pod = exporter_pod(kubectl)
    endpoints_rt = operator_lab.store.registry.for_kind("v1", "Endpoints")
    assert endpoints_rt is not None

    def not_ready() -> bool:
        subsets = operator_lab.store.get(endpoints_rt, NS, SERVICE).get("subsets") or [{}]
        return "notReadyAddresses" in subsets[0]

    assert operator_lab.wait_for(not_ready)
    [subset] = get_json(kubectl, "endpoints", "-n", NS, SERVICE)["subsets"]
    assert "addresses" not in subset
    assert [a["ip"] for a in subset["notReadyAddresses"]] == [pod["status"]["podIP"]]
    [slice_obj] = get_json(kubectl, "endpointslices", "-n", NS)["items"]
    assert slice_obj["endpoints"][0]["conditions"] == {"ready": False, "serving": False, "terminating": False}
    out = kubectl("get", "--raw", PROXY.format(service=f"{SERVICE}:gpu-metrics"), check=False)
    assert out.returncode == 1
    assert f'no endpoints available for service "{SERVICE}"' in out.stderr


def test_a_deleted_slice_is_made_again_and_a_deleted_service_takes_both(
    operator_lab: Simulator, kubectl: Kubectl
) -> None:
    [first] = get_json(kubectl, "endpointslices", "-n", NS)["items"]
    kubectl("delete", "endpointslice", "-n", NS, first["metadata"]["name"])
    assert operator_lab.wait_idle(10)
    [again] = get_json(kubectl, "endpointslices", "-n", NS)["items"]
    assert again["metadata"]["name"] != first["metadata"]["name"]
    assert again["endpoints"] == first["endpoints"]
    kubectl("delete", "service", "-n", NS, SERVICE)
    assert operator_lab.wait_idle(10)
    assert get_json(kubectl, "endpointslices", "-n", NS)["items"] == []
    assert get_json(kubectl, "endpoints", "-n", NS)["items"] == []


@pytest.mark.parametrize(
    "service", [f"{SERVICE}:gpu-metrics", f"{SERVICE}:9400", f"https:{SERVICE}:gpu-metrics"]
)
def test_dcgm_metrics_through_the_service_proxy(
    operator_lab: Simulator, kubectl: Kubectl, service: str
) -> None:
    text = kubectl("get", "--raw", PROXY.format(service=service)).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "DCGM_FI_DEV_GPU_UTIL" in families
    labels = families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels
    assert labels["modelName"] == "NVIDIA GeForce RTX 3060"


def test_no_port_means_the_unnamed_port(operator_lab: Simulator, kubectl: Kubectl) -> None:
    """The Service's one port has a name, so a request without a port finds no endpoint, as on a real
    cluster."""
    out = kubectl("get", "--raw", PROXY.format(service=SERVICE), check=False)
    assert f'no endpoints available for service "{SERVICE}"' in out.stderr


SELECTS_NOTHING = """\
apiVersion: v1
kind: Service
metadata: {name: nobody, namespace: gpu-operator}
spec:
  selector: {app: nobody}
  ports: [{name: web, port: 80, targetPort: http}]
"""


def test_a_service_without_ready_pods_answers_503(operator_lab: Simulator, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=SELECTS_NOTHING)
    assert operator_lab.wait_idle(10)
    endpoints = get_json(kubectl, "endpoints", "-n", NS, "nobody")
    assert "subsets" not in endpoints
    [placeholder] = get_json(kubectl, "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=nobody")[
        "items"
    ]
    assert placeholder["endpoints"] is None and placeholder["ports"] is None
    row = kubectl("get", "endpointslices", "-n", NS, placeholder["metadata"]["name"]).stdout.splitlines()[1]
    assert row.split()[1:4] == ["IPv4", "<unset>", "<unset>"]
    assert kubectl("get", "endpoints", "-n", NS, "nobody").stdout.splitlines()[1].split()[1] == "<none>"
    out = kubectl("get", "--raw", "/api/v1/namespaces/gpu-operator/services/nobody:web/proxy/", check=False)
    assert out.returncode == 1
    assert 'Error from server (ServiceUnavailable): no endpoints available for service "nobody"' in out.stderr
    out = kubectl("get", "--raw", "/api/v1/namespaces/gpu-operator/services/nobody:81/proxy/", check=False)
    assert 'no service port 81 found for service "nobody"' in out.stderr


def test_a_terminating_pod_leaves_the_endpoints_and_stays_in_its_slice_as_terminating(
    operator_lab: Simulator, kubectl: Kubectl
) -> None:
    """On a NotReady node the deletion does not complete: the pod is terminating (and not ready) meanwhile."""
    pod = exporter_pod(kubectl)
    operator_lab.set_node_ready("lab-node", False)
    kubectl("delete", "pod", "-n", NS, pod["metadata"]["name"], "--wait=false")
    assert operator_lab.wait_idle(10)
    endpoints = get_json(kubectl, "endpoints", "-n", NS, SERVICE)
    assert "subsets" not in endpoints
    [slice_obj] = get_json(kubectl, "endpointslices", "-n", NS)["items"]
    terminating = [e for e in slice_obj["endpoints"] if e["targetRef"]["name"] == pod["metadata"]["name"]]
    assert [e["conditions"] for e in terminating] == [{"ready": False, "serving": False, "terminating": True}]
