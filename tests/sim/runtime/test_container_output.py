"""What the simulated containers print into the kubelet's log store; nvidia-smi and exec, without HTTP."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.sim import scenario
from gpuplan.sim.kubelet import container_output, exec, nvidia_smi
from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.testing import SimFactory

PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
NOW = datetime(2026, 12, 1, 16, 0, 0, tzinfo=UTC)


def node_state(**spec: Any) -> NodeGpuState:
    node = scenario.NodeSpec(name="n", gpu={"model": "rtx-3060", "count": 2}, **spec)
    return NodeGpuState(scenario.expand_nodes(scenario.Scenario(nodes=[node]))[0])


def texts(sim: Any, pod: dict[str, Any], container: str, previous: bool = False) -> list[str]:
    return [line.text for line in sim.runtime.logs.read(pod["metadata"]["uid"], container, previous=previous)]


def plugin(sim: Any) -> dict[str, Any]:
    items: list[dict[str, Any]] = sim.store.list(
        sim.store.registry.for_kind("v1", "Pod"), namespace="kube-system"
    ).items
    return items[0]


def test_a_started_plugin_printed_its_start_and_registration(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(30)
    lines = texts(sim, plugin(sim), "nvidia-device-plugin-ctr")
    assert '"Starting NVIDIA Device Plugin" version="v0.20.1"' in lines[0]
    assert sum("Registered device plugin" in line for line in lines) == 1  # the rules' message not repeated


def test_each_crash_loop_restart_is_a_new_run_ending_on_an_error(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(30)
    pod = plugin(sim)
    sim.set_image_fault(PLUGIN_IMAGE, "CrashLoopBackOff")

    def restarted() -> bool:
        status = plugin(sim)["status"]["containerStatuses"][0]
        return int(status["restartCount"]) >= 1

    assert sim.wait_for(restarted, 30)
    uid = pod["metadata"]["uid"]
    assert sim.runtime.logs.finished(uid, "nvidia-device-plugin-ctr")
    current = texts(sim, pod, "nvidia-device-plugin-ctr")
    previous = texts(sim, pod, "nvidia-device-plugin-ctr", previous=True)
    assert current[0].endswith('"Starting NVIDIA Device Plugin" version="v0.20.1"')
    assert current[-1].startswith("E") and "fatal error" in current[-1]
    assert previous[-1].startswith("E")


def test_an_evaluation_that_changes_nothing_does_not_walk_the_output_again(
    sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(30)
    pod = plugin(sim)
    before = texts(sim, pod, "nvidia-device-plugin-ctr")
    runtime = sim.runtime
    evaluated: list[Any] = []
    observed: list[Any] = []
    evaluate, observe = runtime._evaluate_pod, runtime.output.observed
    monkeypatch.setattr(runtime, "_evaluate_pod", lambda record: (evaluated.append(record), evaluate(record)))
    monkeypatch.setattr(runtime.output, "observed", lambda *args: (observed.append(args), observe(*args)))
    nodes = sim.store.registry.for_kind("v1", "Node")
    # a new label: the kubelet evaluates every pod on the node again, and none of them fares otherwise
    label = {"metadata": {"labels": {"example.com/touched": "yes"}}}
    sim.store.patch(nodes, None, "lab-node", label, "application/merge-patch+json", manager="test")
    assert sim.wait_idle(30)
    assert evaluated and not observed
    assert texts(sim, plugin(sim), "nvidia-device-plugin-ctr") == before


def test_echo_lines_of_shell_scripts() -> None:
    container = {"command": ["sh", "-c"], "args": ["echo all validations are successful; sleep infinity"]}
    assert container_output.echo_lines(container) == ["all validations are successful"]
    waiting = {"command": ["sh", "-c", "until [ -f /x ]; do echo waiting; sleep 5; done"]}
    assert container_output.echo_lines(waiting) == []


def test_nvidia_smi_table_lines_line_up() -> None:
    table = nvidia_smi.table(node_state(driver="580.105.08"), NOW)
    framed = [line for line in table.splitlines() if line.startswith(("|", "+"))]
    assert {len(line) for line in framed} == {91}
    assert "Driver Version: 580.105.08" in table and "CUDA Version: 13.0" in table
    assert table.count("NVIDIA GeForce RTX 3060") == 2


def test_nvidia_smi_queries_and_failures() -> None:
    state = node_state(driver="580.105.08")
    query = nvidia_smi.run(["--query-gpu=index,name,memory.total", "--format=csv"], state, NOW)
    assert query.stdout.splitlines() == [
        "index, name, memory.total [MiB]",
        "0, NVIDIA GeForce RTX 3060, 12288 MiB",
        "1, NVIDIA GeForce RTX 3060, 12288 MiB",
    ]
    bad = nvidia_smi.run(["--query-gpu=nope", "--format=csv"], state, NOW)
    assert bad.exit_code == 2 and 'Field "nope" is not a valid field to query.' in bad.stdout
    no_driver = nvidia_smi.run([], node_state(), NOW)
    assert no_driver.exit_code == 9 and no_driver.stdout.startswith("NVIDIA-SMI has failed")


def test_exec_knows_a_few_commands_and_refuses_the_rest() -> None:
    state = node_state(driver="580.105.08")
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    container = pod["spec"]["containers"][0]  # type: ignore[index]
    assert exec.run(pod, container, ["echo", "a", "b"], state, NOW).stdout == "a b\n"
    assert "ID=ubuntu\n" in exec.run(pod, container, ["cat", "/etc/os-release"], state, NOW).stdout
    missing = exec.run(pod, container, ["nvidia-smi"], state, NOW)  # runc, busybox: no nvidia-smi
    assert (
        missing.error is not None
        and 'exec: "nvidia-smi": executable file not found in $PATH' in missing.error
    )


BARE_NODE = {"nodes": [{"name": "bare-node", "gpu": {"model": "rtx-3060", "count": 1}}]}


def run_pod(sim: Any, name: str, image: str, **container: Any) -> dict[str, Any]:
    rt = sim.store.registry.for_kind("v1", "Pod")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "bare-node", "containers": [{"name": "c", "image": image, **container}]},
    }
    created: dict[str, Any] = sim.store.create(rt, pod, namespace="default", manager="test")
    assert sim.wait_idle(30)
    return created


def test_a_crash_prints_the_error_the_rules_give_line_by_line(sim_factory: SimFactory) -> None:
    sim = sim_factory(BARE_NODE, serve=False)
    pod = run_pod(sim, "plugin", PLUGIN_IMAGE)  # no driver on the node, FAIL_ON_INIT_ERROR by default
    lines = texts(sim, pod, "c")
    assert any("] Incompatible platform detected." in line and line.startswith("E") for line in lines)
    assert lines[-1].startswith("E") and lines[-1].endswith(
        "main.go:173] error starting plugins: error creating plugin manager: unable to create plugin "
        "manager: platform detection failed"
    )


def test_the_driver_container_installs_and_waits(sim_factory: SimFactory) -> None:
    sim = sim_factory(BARE_NODE, serve=False)
    pod = run_pod(sim, "driver", "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04")
    lines = texts(sim, pod, "c")
    assert "Starting installation of NVIDIA driver version 580.105.08 for Linux kernel version " in "\n".join(
        lines
    )
    assert lines[-1].startswith("Done, now waiting for signal")
