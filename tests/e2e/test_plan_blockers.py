"""What the refresh already knows the stack cannot become healthy with refuses the plan at plan time: exit 1,
one ``Error:`` line per broken rule naming the nodes, the component and the fix; nothing saved, nothing
applied (apply would otherwise wait out a gate's timeout and roll back every change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

MIXED = Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "mixed.yaml"
HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: mixed}\nspec:\n"
GFD_DRIVER = "nvidia.com/cuda.driver-version.full"


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


def mixed(**changes: dict[str, Any]) -> dict[str, Any]:
    """The mixed scenario with some nodes changed (``rtx_node={"toolkit": None}`` drops its toolkit)."""
    scenario = yaml.safe_load(MIXED.read_text())
    for node in scenario["nodes"]:
        for key, value in changes.get(node["name"].replace("-", "_"), {}).items():
            if value is None:
                node.pop(key, None)
            else:
                node[key] = value
    return scenario


def plan(
    sim_factory: SimFactory,
    scenario: dict[str, Any],
    spec: str,
    folder: Path,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str, Path]:
    sim = sim_factory(scenario)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    spec_file = folder / "gpustack.yaml"
    spec_file.write_text(HEADER + spec)
    saved = folder / "stack.plan"
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--out", str(saved)])
    out, err = capsys.readouterr()
    return code, out, err, saved


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("Error:")]


def test_an_external_toolkit_on_a_node_without_the_nvidia_handler_is_refused(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = mixed(rtx_node={"toolkit": None}, l40s_node={"toolkit": None})
    spec = "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    code, out, err, saved = plan(sim_factory, scenario, spec, tmp_path, capsys)
    assert code == 1
    assert errors(err) == [
        "Error: toolkit, on 2 nodes: l40s-node, rtx-node: the toolkit is external, but the node's container "
        "runtime has no nvidia runtime handler: pods of RuntimeClass nvidia cannot start there"
    ]
    assert "Hint: install the NVIDIA Container Toolkit on the node" in err and "toolkit.owner: gpuplan" in err
    assert "Findings:" in out, "the plan is still shown, its findings with it"
    assert not saved.exists(), "a refused plan is not saved"


def test_an_external_driver_version_a_node_does_not_report_is_refused(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = mixed()
    for node in scenario["nodes"]:  # GFD has run: the nodes say which driver they run
        node["labels"] = {"nvidia.com/gpu.product": "NVIDIA-GPU", GFD_DRIVER: node["driver"]}
    spec = '  driver: {owner: external, version: "580.105.08"}\n  toolkit: {owner: external}\n'
    code, _, err, saved = plan(sim_factory, scenario, spec, tmp_path, capsys)
    assert code == 1
    assert errors(err) == [
        "Error: driver, node a100-node: the node reports driver 570.195.03, the spec expects 580.105.08"
    ]
    assert "Hint: upgrade the host driver, or set driver.version to the version the nodes run" in err
    assert not saved.exists()


def test_a_node_selector_matching_no_node_is_refused_with_the_labels_nodes_carry(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = (
        '  nodeSelector: {nvidia.com/gpu.present: "true"}\n'
        "  driver: {owner: external}\n  toolkit: {owner: external}\n"
        '  gfd: {nodeSelector: {feature.node.kubernetes.io/pci-10de.present: "false"}}\n'
    )
    code, _, err, saved = plan(sim_factory, mixed(), spec, tmp_path, capsys)
    assert code == 1
    assert errors(err) == [
        "Error: spec.nodeSelector (nvidia.com/gpu.present=true) matches none of the 4 nodes",
        "Error: gfd: gfd.nodeSelector (feature.node.kubernetes.io/pci-10de.present=false) matches none of "
        "the 4 nodes",
    ]
    assert (
        'Hint: set spec.nodeSelector to {feature.node.kubernetes.io/pci-10de.present: "true"}, which 4 '
        "node(s) carry (a100-node, h100-node, l40s-node and 1 more)"
    ) in err
    assert (
        "Hint: the nodes carry feature.node.kubernetes.io/pci-10de.present=true; set gfd.nodeSelector to "
        "what they carry"
    ) in err
    assert not saved.exists()


def test_a_healthy_mixed_cluster_plans_without_refusal(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    code, _, err, saved = plan(sim_factory, mixed(), spec, tmp_path, capsys)
    assert (code, errors(err)) == (0, [])
    assert saved.exists()


CUDA_CHECK = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "cuda-check", "namespace": "default"},
    "spec": {
        "selector": {"matchLabels": {"app": "cuda-check"}},
        "template": {
            "metadata": {"labels": {"app": "cuda-check"}},
            "spec": {
                "containers": [
                    {
                        "name": "check",
                        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
                    }
                ]
            },
        },
    },
}
NO_SUCH_HOST = "no such host"


def test_an_image_of_a_registry_the_nodes_cannot_reach_is_refused_per_repository(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The A100 and H100 nodes cannot resolve nvcr.io: a workload's pods there already wait in
    ImagePullBackOff with the DNS error, so every image of nvcr.io the plan pulls is refused on them, one
    line per repository naming the nodes and the components, with the mirror as the fix."""
    gapped = {"unreachableRegistries": ["nvcr.io"]}
    scenario = mixed(a100_node=gapped, h100_node=gapped)
    scenario["objects"] = [CUDA_CHECK]
    spec = "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    code, out, err, saved = plan(sim_factory, scenario, spec, tmp_path, capsys)
    assert code == 1
    cause = (
        "these nodes cannot reach nvcr.io (their pulls from it fail with no such host), so the pods of {} "
        "cannot pull it there"
    )
    assert errors(err) == [
        "Error: dcgmExporter, on 2 nodes: a100-node, h100-node: nvcr.io/nvidia/k8s/dcgm-exporter: "
        + cause.format("dcgmExporter"),
        "Error: devicePlugin, on 2 nodes: a100-node, h100-node: nvcr.io/nvidia/k8s-device-plugin: "
        + cause.format("devicePlugin and gfd"),
        "Error: validator, on 2 nodes: a100-node, h100-node: nvcr.io/nvidia/gpu-operator: "
        + cause.format("devicePlugin, gfd, dcgmExporter and validator"),
    ]
    assert (
        "Hint: pull it from a mirror these nodes reach: set spec.devicePlugin.repository and "
        "spec.gfd.repository to the mirror (with imagePullSecrets if it needs a login), or let the nodes "
        "reach nvcr.io (DNS, firewall, proxy)"
    ) in err
    assert "Hint: pull it from a mirror these nodes reach: set spec.validator.repository to the mirror" in err
    assert "Findings:" in out and not saved.exists()


def test_a_tag_the_registry_lacks_is_no_unreachable_registry(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload stuck on a tag nvcr.io does not have: the registry answered, so nothing is refused (the
    tag is validate's warning and the gate's permanent cause)."""
    scenario = mixed()
    broken = yaml.safe_load(yaml.safe_dump(CUDA_CHECK))
    broken["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-0"
    )
    scenario["objects"] = [broken]
    spec = "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    code, _, err, saved = plan(sim_factory, scenario, spec, tmp_path, capsys)
    assert (code, errors(err)) == (0, [])
    assert saved.exists()
