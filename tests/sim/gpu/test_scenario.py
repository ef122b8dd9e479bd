"""Scenario files: the format of design §6, built-ins, fleet-N expansion and errors with file:line:column."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.errors import ConfigError
from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.scenario import (
    FLEET_DRIVER,
    ScenarioError,
    expand_nodes,
    fleet_counts,
    gpu_faults_for,
    load_scenario,
    parse_scenario,
)

BAD = sorted((Path(__file__).parent / "bad_scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_each_bad_scenario_fails_with_its_position_and_a_hint(path: Path) -> None:
    """Every corpus file starts with ``# expect: LINE:COL <text in the error> | <text in the hint>``."""
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    position, rest = expected.split(" ", 1)
    message, _, hint = (part.strip() for part in rest.partition("|"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    error = caught.value
    assert error.where == f"{path}:{position}"
    assert message in str(error)
    assert hint in error.hint or hint in str(error)
    assert str(error).startswith(f"{path}:{position}: ")


def test_corpus_is_not_trivial() -> None:
    assert len(BAD) >= 15


def test_scenario_errors_are_config_errors_the_cli_renders() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario("nodes:\n  - name: a\n    gpu: {model: gtx-1080}\n", source="s.yaml")
    rendered = caught.value.render()
    assert rendered.startswith("Error: s.yaml:3:18: nodes[0].gpu.model: unknown GPU model 'gtx-1080'")
    assert "Hint: use one of the catalog keys" in rendered


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("labb")
    assert "lab" in caught.value.hint and "mixed" in caught.value.hint and "fleet-N" in caught.value.hint


def test_lab_is_the_single_node_lab_of_design_1() -> None:
    scenario = load_scenario("lab")
    (node,) = expand_nodes(scenario)
    assert (node.name, node.gpu, node.gpu_count) == ("lab-node", CATALOG["rtx-3060"], 1)
    assert (node.os, node.kernel, node.host_driver, node.host_toolkit) == (
        "ubuntu24.04",
        "6.8.0-101-generic",
        "580.105.08",
        "1.18.1",
    )
    assert node.container_runtime.startswith("containerd://")
    (daemonset,) = scenario.objects
    assert (daemonset["kind"], daemonset["metadata"]) == (
        "DaemonSet",
        {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    )
    template = daemonset["spec"]["template"]
    assert (
        daemonset["spec"]["selector"]["matchLabels"]
        == template["metadata"]["labels"]
        == {"name": "nvidia-device-plugin-ds"}
    )
    spec = template["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeSelector" not in spec and "runtimeClassName" not in spec
    assert spec["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    assert spec["volumes"] == [
        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
    ]


def test_mixed_has_one_node_of_each_of_four_models_with_host_stacks() -> None:
    nodes = expand_nodes(load_scenario("mixed"))
    assert sorted(n.gpu.key for n in nodes if n.gpu) == ["a100-80gb", "h100-80gb", "l40s", "rtx-3060"]
    assert all(n.host_driver and n.host_toolkit for n in nodes)
    assert len({n.os for n in nodes}) > 1 and len({n.kernel for n in nodes}) > 1


def test_upgrade4_and_drifted_builtins() -> None:
    upgrade = expand_nodes(load_scenario("upgrade4"))
    assert [n.name for n in upgrade] == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert all(
        n.host_driver is None and n.host_toolkit is None and n.default_runtime == "runc" for n in upgrade
    )
    drifted = expand_nodes(load_scenario("drifted"))
    assert len({n.host_driver for n in drifted}) == 3
    assert [n.host_toolkit is None for n in drifted] == [False, False, True]


@pytest.mark.parametrize("total", [1, 2, 7, 13, 100, 999])
def test_fleet_n_has_exactly_n_uniquely_named_nodes(total: int) -> None:
    nodes = expand_nodes(load_scenario(f"fleet-{total}"))
    assert len(nodes) == total == sum(fleet_counts(total))
    assert len({n.name for n in nodes}) == total
    assert [n.ordinal for n in nodes] == list(range(total))


def test_fleet_is_mixed_deterministic_and_datacentre_nodes_have_8_gpus() -> None:
    first = expand_nodes(load_scenario("fleet-200"))
    again = expand_nodes(load_scenario("fleet-200"))
    assert [(n.name, n.gpu) for n in first] == [(n.name, n.gpu) for n in again]
    models = {n.gpu.key for n in first if n.gpu}
    assert models == set(CATALOG)
    for node in first:
        assert node.gpu is not None
        assert node.gpu_count == (1 if node.gpu.pci_class == "0300" else 8)
        assert (node.host_driver, node.host_toolkit) == (FLEET_DRIVER, "1.18.1")
    assert first[0].name == "h100-01"  # 60 H100 nodes: padded to 2 digits
    assert first[-1].name.startswith("rtx-")


def test_fleet_5000_stays_a_handful_of_pools() -> None:
    """fleet-N is generated as one NodeSpec per pool (namePrefix + count), so validating it costs the same for
    5000 nodes as for 5; only expand_nodes is per node (timed in benchmarks/, not asserted here)."""
    scenario = load_scenario("fleet-5000")
    assert len(scenario.nodes) == 8
    nodes = expand_nodes(scenario)
    assert len(nodes) == 5000
    assert nodes[0].name == "h100-0001"


def test_name_prefix_is_zero_padded_to_the_count_width() -> None:
    scenario = parse_scenario("nodes:\n  - {namePrefix: gpu-, count: 1000, gpu: {model: t4}}\n")
    names = [n.name for n in expand_nodes(scenario)]
    assert names[:2] == ["gpu-0001", "gpu-0002"] and names[-1] == "gpu-1000"


def test_full_scenario_round_trip_of_every_contract_key(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("""
nodes:
  - name: lab-node
    gpu: {model: rtx-3060, count: 1}
    os: ubuntu24.04
    kernel: 6.8.0-101-generic
    driver: "580.105.08"
    toolkit: "1.18.1"
    labels: {team: ml}
    taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
  - name: cpu-node
    nfd: false
objects:
  - {apiVersion: v1, kind: Namespace, metadata: {name: gpu-operator}}
faults:
  images: {"nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9-broken": CrashLoopBackOff}
  slowImages: {"nvcr.io/nvidia/k8s-device-plugin:v0.20.1": 2.5}
  api: {errorRate: 0.1, codes: [500, 429], latencyMs: 5}
  gpus: [{node: lab-node, gpu: 0, temperature: 95, xid: 79}]
  nodes: [{node: cpu-node}]
timing: {podReadySeconds: 0.5, imagePullSeconds: 0.1, crashLoopBackoffSeconds: 1}
""")
    scenario = load_scenario(path)
    lab, cpu = expand_nodes(scenario)
    assert lab.labels == {"team": "ml"} and lab.taints == ({"key": "nvidia.com/gpu", "effect": "NoSchedule"},)
    assert (cpu.gpu, cpu.gpu_count, cpu.default_runtime) == (None, 0, "runc")
    assert (lab.nfd, cpu.nfd) == (True, False)
    assert lab.default_runtime == "nvidia"  # a host toolkit configured as containerd's default (README)
    assert scenario.faults.images == {"nvcr.io/nvidia/k8s/dcgm-exporter:9.9.9-broken": "CrashLoopBackOff"}
    assert scenario.faults.slowImages == {"nvcr.io/nvidia/k8s-device-plugin:v0.20.1": 2.5}
    assert scenario.faults.api == {
        "errorRate": 0.1,
        "codes": [500, 429],
        "latencyMs": 5.0,
        "dropRate": 0.0,
        "retryAfterSeconds": 1,
    }
    assert scenario.faults.nodes[0].notReady is True
    assert (scenario.timing.podReadySeconds, scenario.timing.crashLoopBackoffSeconds) == (0.5, 1.0)
    assert gpu_faults_for(scenario, lab)[0].xid == 79 and gpu_faults_for(scenario, cpu) == {}


def test_a_gpu_fault_without_index_hits_every_gpu_of_the_node() -> None:
    scenario = parse_scenario(
        "nodes:\n  - {name: a, gpu: {model: h100-80gb, count: 8}}\n"
        "faults:\n  gpus: [{node: a, temperature: 90}]\n"
    )
    faults = gpu_faults_for(scenario, expand_nodes(scenario)[0])
    assert sorted(faults) == list(range(8)) and {f.temperature for f in faults.values()} == {90}


def test_defaults_of_timing_and_faults() -> None:
    scenario = parse_scenario("nodes:\n  - name: a\n")
    assert (
        scenario.timing.podReadySeconds,
        scenario.timing.imagePullSeconds,
        scenario.timing.crashLoopBackoffSeconds,
    ) == (0.1, 0.0, 0.2)
    assert scenario.faults.api is None and scenario.faults.gpus == [] and scenario.objects == []
