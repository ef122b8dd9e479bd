"""The /sim/v1/ control API over HTTPS: faults and node events at runtime, seen through kubectl."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

pytestmark = pytest.mark.kubectl
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"


def call(
    sim: Simulator, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    context = ssl.create_default_context(cadata=(sim.ca_pem or b"").decode())
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        sim.url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token or sim.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_status_and_token(lab_sim: Simulator) -> None:
    code, body = call(lab_sim, "GET", "/sim/v1/status")
    assert code == 200 and body["scenario"] == "lab" and body["nodes"] == 1 and body["url"] == lab_sim.url
    code, body = call(lab_sim, "GET", "/sim/v1/status", token="wrong")
    assert code == 401 and body["reason"] == "Unauthorized"


def test_image_faults_at_runtime(lab_sim: Simulator, kubectl: Kubectl) -> None:
    code, body = call(lab_sim, "PATCH", "/sim/v1/faults", {"images": {PLUGIN: "CrashLoopBackOff"}})
    assert code == 200 and body["images"] == {PLUGIN: "CrashLoopBackOff"}
    assert lab_sim.wait_for(
        lambda: "CrashLoopBackOff" in kubectl("get", "pods", "-n", "kube-system").stdout, 10
    )
    code, body = call(lab_sim, "PUT", "/sim/v1/faults", {"images": {}})
    assert code == 200 and body["images"] == {}
    assert lab_sim.wait_for(lambda: " 1/1 " in kubectl("get", "pods", "-n", "kube-system").stdout, 10)


def test_api_faults_at_runtime(lab_sim: Simulator, kubectl: Kubectl) -> None:
    code, body = call(lab_sim, "PATCH", "/sim/v1/faults", {"api": {"errorRate": 1.0, "codes": [503]}})
    assert code == 200 and body["api"]["errorRate"] == 1.0
    code, body = call(lab_sim, "GET", "/api/v1/namespaces/kube-system/pods")
    assert code == 503 and body["kind"] == "Status"
    code, _ = call(lab_sim, "PATCH", "/sim/v1/faults", {"api": None})
    assert code == 200
    assert call(lab_sim, "GET", "/api/v1/namespaces/kube-system/pods")[0] == 200


def test_gpu_faults(lab_sim: Simulator, kubectl: Kubectl) -> None:
    code, body = call(
        lab_sim,
        "PATCH",
        "/sim/v1/faults",
        {"gpus": [{"node": "lab-node", "gpu": 0, "temperature": 99, "xid": 79}]},
    )
    assert code == 200 and body["gpus"] == [{"node": "lab-node", "gpu": 0, "temperature": 99, "xid": 79}]
    code, body = call(lab_sim, "PATCH", "/sim/v1/faults", {"gpus": [{"node": "lab-node", "gpu": 3}]})
    assert code == 400 and "no GPU 3" in body["message"]


def test_node_not_ready_and_back(lab_sim: Simulator, kubectl: Kubectl) -> None:
    assert call(lab_sim, "POST", "/sim/v1/nodes/lab-node/notready")[0] == 200
    assert kubectl("get", "nodes").stdout.splitlines()[1].split()[1] == "NotReady"
    assert call(lab_sim, "POST", "/sim/v1/nodes/lab-node/ready")[0] == 200
    assert kubectl("get", "nodes").stdout.splitlines()[1].split()[1] == "Ready"
    assert call(lab_sim, "PATCH", "/sim/v1/faults", {"nodes": [{"node": "lab-node"}]})[1]["nodes"] == [
        {"node": "lab-node", "notReady": True}
    ]
    code, body = call(lab_sim, "PUT", "/sim/v1/faults", {"nodes": []})
    assert code == 200 and body["nodes"] == []
    assert kubectl("get", "nodes").stdout.splitlines()[1].split()[1] == "Ready"
    code, body = call(lab_sim, "POST", "/sim/v1/nodes/nope/notready")
    assert code == 404 and body["reason"] == "NotFound"


def test_a_node_joins_and_leaves(lab_sim: Simulator, kubectl: Kubectl) -> None:
    spec = {"name": "joiner", "gpu": {"model": "t4", "count": 1}, "driver": "580.105.08", "toolkit": "1.18.1"}
    code, body = call(lab_sim, "POST", "/sim/v1/nodes", spec)
    assert code == 201 and body["added"] == ["joiner"]
    assert lab_sim.wait_idle(10)
    wide = kubectl("get", "pods", "-n", "kube-system", "-o", "wide").stdout
    assert "joiner" in wide
    assert call(lab_sim, "DELETE", "/sim/v1/nodes/joiner")[0] == 200
    assert lab_sim.wait_idle(10)
    assert kubectl("get", "nodes", "-o", "name").stdout.split() == ["node/lab-node"]


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        ("POST", "/sim/v1/nodes", {"name": "x", "gpu": {"model": "no-such-gpu"}}, 400),
        ("PATCH", "/sim/v1/faults", {"imagez": {}}, 400),
        ("PATCH", "/sim/v1/faults", {"images": {PLUGIN: "Explodes"}}, 400),
        ("DELETE", "/sim/v1/faults", None, 405),
        ("GET", "/sim/v1/nothing", None, 404),
        ("GET", "/sim/v1/idle", None, 405),
        ("POST", "/sim/v1/idle", {"timeoutSeconds": -1}, 400),
        ("PUT", "/sim/v1/nodes/lab-node/hostdriver", {}, 400),
        ("POST", "/sim/v1/nodes/lab-node/hostdriver", {"version": "580.105.08"}, 405),
    ],
)
def test_control_errors_are_status_objects(
    lab_sim: Simulator, method: str, path: str, body: Any, code: int
) -> None:
    got, answer = call(lab_sim, method, path, body)
    assert got == code and answer["kind"] == "Status" and answer["code"] == code


def test_idle_and_a_host_driver_upgrade(lab_sim: Simulator, kubectl: Kubectl) -> None:
    code, body = call(lab_sim, "POST", "/sim/v1/idle", {"timeoutSeconds": 30})
    assert code == 200 and body == {"idle": True}
    code, body = call(lab_sim, "PUT", "/sim/v1/nodes/lab-node/hostdriver", {"version": "580.126.09"})
    assert code == 200 and body["details"] == {"name": "lab-node"}
    assert lab_sim.wait_idle(30)
    assert lab_sim.runtime.states["lab-node"].host_driver == "580.126.09"
