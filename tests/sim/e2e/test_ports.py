"""What simulated containers answer on their ports, through the pod proxy and kubectl port-forward: the
node-status exporter's validation gauges, and any port a scenario declares."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.scenario import PortSpec, Scenario, load_scenario
from gpuplan.sim.testing import SimFactory, kubectl_binary

WEB = "registry.example.com/web:1.0"
EXPORTER = "nvcr.io/nvidia/gpu-operator:v26.7.0"


def scenario_with_a_port() -> Scenario:
    web = PortSpec(image="registry.example.com/web", port=8080, path="/hello", body="hi there\n")
    return load_scenario("lab").model_copy(update={"ports": [web]})


def running_pod(sim: Simulator, name: str, image: str, env: list[dict[str, str]] | None = None) -> None:
    pods = sim.store.registry.for_kind("v1", "Pod")
    container = {"name": "main", "image": image, **({"env": env} if env else {})}
    body = {"metadata": {"name": name}, "spec": {"containers": [container]}}
    sim.store.create(pods, body, namespace="default", manager="test")
    assert sim.wait_for(
        lambda: sim.store.get(pods, "default", name).get("status", {}).get("phase") == "Running", 30
    )


def test_a_port_the_scenario_declares_answers_through_the_proxy(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    sim = sim_factory(scenario_with_a_port())
    running_pod(sim, "web", WEB)
    assert sim.wait_idle(30)
    pod = sim.store.get(sim.store.registry.for_kind("v1", "Pod"), "default", "web")
    assert sim.loop.run_sync(lambda: sim.runtime.serve_proxy(pod, 8080, "/elsewhere"))[0] == 404
    assert sim.loop.run_sync(lambda: sim.runtime.serve_proxy(pod, 8081, "/hello"))[0] == 503
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    kubectl = [kubectl_binary(), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}"]
    raw = subprocess.run(
        [*kubectl, "get", "--raw", "/api/v1/namespaces/default/pods/web:8080/proxy/hello"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert raw.stdout == "hi there\n", raw.stderr
    with subprocess.Popen(
        [*kubectl, "port-forward", "pod/web", "0:8080"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as forward:
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080"
            local = int(line.split("127.0.0.1:")[1].split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello", timeout=30) as answer:
                assert answer.read() == b"hi there\n"
        finally:
            forward.terminate()


def test_the_node_status_exporter_publishes_the_validations_as_gauges(lab_sim: Simulator) -> None:
    metrics_mode = [{"name": "COMPONENT", "value": "metrics"}, {"name": "METRICS_PORT", "value": "8000"}]
    running_pod(lab_sim, "node-status", EXPORTER, metrics_mode)
    pod = lab_sim.store.get(lab_sim.store.registry.for_kind("v1", "Pod"), "default", "node-status")
    status, _, body = lab_sim.loop.run_sync(lambda: lab_sim.runtime.serve_proxy(pod, 8000, "/metrics"))
    text = body.decode()
    assert status == 200
    # the lab: the host's driver and toolkit, the hand-deployed device plugin advertising its one GPU
    assert "gpu_operator_node_driver_ready 1" in text and "gpu_operator_node_toolkit_ready 1" in text
    assert "gpu_operator_nvidia_pci_devices_total 1" in text
    assert lab_sim.loop.run_sync(lambda: lab_sim.runtime.serve_proxy(pod, 9400, "/metrics"))[0] == 503
