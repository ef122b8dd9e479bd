"""Compatibility rules of facts §10, each with a case that passes and one that fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.spec import compat
from gpuplan.planner.spec import model as spec

NodeFactory = Callable[..., dict[str, Any]]  # the gpu_node fixture of conftest.py


def make_spec(body: str = "") -> spec.Spec:
    text = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: t}\nspec:\n" + (
        body or "  {}\n"
    )
    return spec.parse_spec(text, filename="gpustack.yaml")


def facts(factory: NodeFactory, **kwargs: Any) -> NodeFacts:
    return NodeFacts.from_node(factory(**kwargs))


def messages(findings: list[compat.Finding], severity: str = "error") -> list[str]:
    return [f.message for f in findings if f.severity == severity]


# -- what the spec alone tells ------------------------------------------------------------------------------


def test_default_spec_is_clean() -> None:
    assert compat.check_spec(make_spec()) == []


def test_driver_branch_outside_the_v26_7_matrix_is_a_warning() -> None:
    assert compat.check_spec(make_spec('  driver: {version: "580.105.08"}\n')) == []
    findings = compat.check_spec(make_spec('  driver: {version: "550.144.03"}\n'))
    assert [(f.severity, f.component) for f in findings] == [("warning", "driver")]
    assert "R550" in findings[0].message and "R595" in findings[0].hint


def test_an_external_driver_without_version_is_not_checked_for_its_branch() -> None:
    assert compat.check_spec(make_spec("  driver: {owner: external}\n  toolkit: {owner: external}\n")) == []


def test_components_without_driver_or_toolkit_are_errors() -> None:
    findings = compat.check_spec(make_spec("  toolkit: {owner: none}\n"))
    assert messages(findings) == [
        "toolkit has owner none, but devicePlugin, gfd, dcgmExporter, validator need it on every GPU node"
    ]
    everything_off = "".join(
        f"  {c}: {{owner: none}}\n"
        for c in ("driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator")
    )
    assert compat.check_spec(make_spec(everything_off)) == []


def test_mps_with_mixed_mig_strategy_is_an_error() -> None:
    mps = "  devicePlugin: {config: {mps: {replicas: 4}}}\n"
    assert compat.check_spec(make_spec(mps + "  mig: {strategy: none}\n")) == []
    assert messages(compat.check_spec(make_spec(mps + "  mig: {strategy: mixed}\n")))
    warned = compat.check_spec(make_spec(mps + "  mig: {strategy: single}\n"))
    assert messages(warned, "warning") and not messages(warned)


def test_containerised_driver_with_host_toolkit_warns_about_the_driver_root() -> None:
    assert compat.check_spec(make_spec()) == []
    findings = compat.check_spec(make_spec("  toolkit: {owner: external}\n"))
    assert [(f.severity, f.component) for f in findings] == [("warning", "toolkit")]
    assert "/run/nvidia/driver" in findings[0].message


def test_validator_left_out_is_a_warning() -> None:
    findings = compat.check_spec(make_spec("  validator: {owner: external}\n"))
    assert [(f.severity, f.component) for f in findings] == [("warning", "validator")]


def test_replicas_below_two_is_a_spec_error() -> None:
    with pytest.raises(Exception, match="replicas"):
        make_spec("  devicePlugin: {config: {timeSlicing: {replicas: 1}}}\n")
    assert make_spec("  devicePlugin: {config: {timeSlicing: {replicas: 2}}}\n")


# -- the nodes' GPUs
# ------------------------------------------------------------------------------------------

EXTERNAL = "  driver: {owner: external}\n  toolkit: {owner: external}\n"


def test_default_driver_595_is_refused_on_volta(gpu_node: NodeFactory) -> None:
    v100 = facts(gpu_node, name="v100-0", gpu="v100")
    findings = compat.check_nodes(make_spec(), [v100])
    assert [(f.severity, f.component, f.node) for f in findings] == [("error", "driver", "v100-0")]
    assert "last driver branch for Volta and older GPUs is R580" in findings[0].message
    assert compat.check_nodes(make_spec('  driver: {version: "580.105.08"}\n'), [v100]) == []


def test_blackwell_needs_570_and_b200_570_133_20(gpu_node: NodeFactory) -> None:
    b200 = facts(gpu_node, name="b200-0", gpu="b200")
    pro = facts(gpu_node, name="pro-0", gpu="rtx-pro-6000")
    assert messages(compat.check_nodes(make_spec('  driver: {version: "570.124.06"}\n'), [b200]))
    assert compat.check_nodes(make_spec('  driver: {version: "570.124.06"}\n'), [pro]) == []
    assert messages(compat.check_nodes(make_spec('  driver: {version: "565.57.01"}\n'), [pro]))
    assert compat.check_nodes(make_spec('  driver: {version: "570.133.20"}\n'), [b200]) == []
    assert compat.check_nodes(make_spec(), [b200, pro]) == []


def test_hopper_needs_r525(gpu_node: NodeFactory) -> None:
    h100 = facts(gpu_node, gpu="h100-80gb")
    assert (
        "Hopper needs branch R525"
        in messages(compat.check_nodes(make_spec('  driver: {version: "520.61.05"}\n'), [h100]))[0]
    )
    assert compat.check_nodes(make_spec('  driver: {version: "535.309.01"}\n'), [h100]) == []


def test_external_driver_version_is_checked_against_the_architecture_too(gpu_node: NodeFactory) -> None:
    v100 = facts(gpu_node, gpu="v100", driver="595.91.07")
    body = '  driver: {owner: external, version: "595.91.07"}\n  toolkit: {owner: external}\n'
    assert messages(compat.check_nodes(make_spec(body), [v100]))


def test_kernel_module_type_vs_architecture(gpu_node: NodeFactory) -> None:
    b200 = facts(gpu_node, gpu="b200")
    v100 = facts(gpu_node, gpu="v100")
    assert (
        "open kernel modules"
        in messages(compat.check_nodes(make_spec("  driver: {kernelModuleType: proprietary}\n"), [b200]))[0]
    )
    assert compat.check_nodes(make_spec("  driver: {kernelModuleType: open}\n"), [b200]) == []
    older = make_spec('  driver: {kernelModuleType: open, version: "580.105.08"}\n')
    assert "predates Turing" in messages(compat.check_nodes(older, [v100]))[0]
    assert (
        compat.check_nodes(
            make_spec('  driver: {kernelModuleType: proprietary, version: "580.105.08"}\n'), [v100]
        )
        == []
    )


def test_mig_strategy_on_gpus_that_are_not_mig_capable(gpu_node: NodeFactory) -> None:
    rtx, a100 = facts(gpu_node, gpu="rtx-3060"), facts(gpu_node, gpu="a100-80gb")
    mixed = make_spec(EXTERNAL + "  mig: {strategy: mixed}\n")
    findings = compat.check_nodes(mixed, [rtx, a100])
    assert [(f.severity, f.node) for f in findings] == [("warning", "gpu-0")]
    assert "not MIG-capable" in findings[0].message
    assert compat.check_nodes(make_spec(EXTERNAL), [rtx]) == []  # the default strategy is harmless there


def test_mps_on_mig_gpus_is_an_error(gpu_node: NodeFactory) -> None:
    body = EXTERNAL + "  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 4}}}\n"
    mig_on = facts(gpu_node, gpu="a100-80gb", labels={"nvidia.com/mig.config": "all-1g.10gb"})
    mig_off = facts(gpu_node, gpu="a100-80gb", labels={"nvidia.com/mig.config": "all-disabled"})
    assert (
        "MPS is not supported on MIG-enabled GPUs"
        in messages(compat.check_nodes(make_spec(body), [mig_on]))[0]
    )
    assert compat.check_nodes(make_spec(body), [mig_off]) == []


def test_mps_replicas_above_16_before_turing(gpu_node: NodeFactory) -> None:
    v100 = facts(gpu_node, gpu="v100")
    t4 = facts(gpu_node, gpu="t4")
    body = EXTERNAL + "  mig: {strategy: none}\n  devicePlugin: {config: {mps: {replicas: 20}}}\n"
    assert "at most 16" in messages(compat.check_nodes(make_spec(body), [v100]))[0]
    assert compat.check_nodes(make_spec(body), [t4]) == []
    with pytest.raises(Exception, match="replicas"):
        make_spec(EXTERNAL + "  devicePlugin: {config: {mps: {replicas: 49}}}\n")


def test_gpuplan_driver_on_a_node_with_a_host_driver(gpu_node: NodeFactory) -> None:
    host = facts(gpu_node, gpu="a100-80gb", driver="580.105.08")
    labelled = facts(gpu_node, gpu="a100-80gb", labels={"nvidia.com/gpu.deploy.driver": "pre-installed"})
    ours = replace(facts(gpu_node, gpu="a100-80gb", driver="595.91.07"), containerized_driver=True)
    assert (
        "already runs a host driver (driver 580.105.08)"
        in messages(compat.check_nodes(make_spec(), [host]))[0]
    )
    assert messages(compat.check_nodes(make_spec(), [labelled]))
    assert compat.check_nodes(make_spec(), [ours]) == []
    assert compat.check_nodes(make_spec(EXTERNAL), [host]) == []


def test_external_driver_version_the_node_does_not_report(gpu_node: NodeFactory) -> None:
    body = '  driver: {owner: external, version: "580.105.08"}\n  toolkit: {owner: external}\n'
    same = facts(gpu_node, gpu="rtx-3060", driver="580.105.08")
    other = facts(gpu_node, gpu="rtx-3060", driver="570.195.03")
    assert compat.check_nodes(make_spec(body), [same]) == []
    assert messages(compat.check_nodes(make_spec(body), [other])) == [
        "the node reports driver 570.195.03, the spec expects 580.105.08"
    ]


def test_unknown_gpu_is_reported_as_unknown(gpu_node: NodeFactory) -> None:
    unknown = facts(gpu_node, name="lab-node", gpu="rtx-3060", gfd=False)
    findings = compat.check_nodes(make_spec(), [unknown])
    assert [(f.severity, f.node) for f in findings] == [("warning", "lab-node")]
    assert findings[0].message.startswith("GPU model unknown until GFD runs")
    # nothing GPU-specific to check: no finding at all
    assert compat.check_nodes(make_spec(EXTERNAL), [unknown]) == []


def test_nodes_without_gpus_are_skipped(gpu_node: NodeFactory) -> None:
    assert compat.check_nodes(make_spec(), [facts(gpu_node, gpu=None)]) == []


# -- what cannot become healthy on the nodes as they are ----------------------------------------------------

GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def test_a_host_toolkit_is_refused_only_where_the_node_reports_handlers_without_nvidia() -> None:
    """A kubelet older than 1.30 reports no handlers: no evidence, so no refusal (the gate judges it)."""
    external = make_spec("  toolkit: {owner: external}\n")
    nodes = [
        NodeFacts("old-kubelet", labels=GPU, has_nvidia_gpu=True),
        NodeFacts("no-toolkit", labels=GPU, has_nvidia_gpu=True, runtime_handlers=("", "runc")),
        NodeFacts("toolkit", labels=GPU, has_nvidia_gpu=True, runtime_handlers=("", "nvidia", "runc")),
        NodeFacts("cpu", runtime_handlers=("", "runc")),
    ]
    found = compat.check_fleet(external, nodes)
    assert [(f.severity, f.component, f.node) for f in found] == [("error", "toolkit", "no-toolkit")]
    assert compat.check_fleet(make_spec("  toolkit: {owner: gpuplan}\n"), nodes) == []


def test_a_selector_no_node_carries_is_refused_with_the_values_nodes_do_carry() -> None:
    nodes = [NodeFacts("gpu-1", labels={"pool": "train", **GPU}, has_nvidia_gpu=True)]
    [finding] = compat.check_fleet(make_spec('  devicePlugin: {nodeSelector: {pool: "serve"}}\n'), nodes)
    assert (finding.severity, finding.component) == ("error", "devicePlugin")
    assert finding.message == "devicePlugin.nodeSelector (pool=serve) matches none of the 1 nodes"
    assert finding.hint == "the nodes carry pool=train; set devicePlugin.nodeSelector to what they carry"
    assert (
        compat.check_fleet(make_spec('  devicePlugin: {owner: none, nodeSelector: {pool: "x"}}\n'), nodes)
        == []
    )
    assert compat.check_fleet(make_spec(), []) == [], "no nodes listed: nothing to judge a selector by"


def mig(config: str, manager: str = "{owner: gpuplan}") -> spec.Spec:
    return make_spec(EXTERNAL + f"  mig: {{strategy: mixed, config: {config}}}\n  migManager: {manager}\n")


def test_a_mig_config_the_gpu_cannot_take_is_an_error(gpu_node: NodeFactory) -> None:
    a100 = facts(gpu_node, name="a100-0", gpu="a100-80gb")
    h200 = facts(gpu_node, name="h200-0", gpu="h200")
    assert compat.check_nodes(mig("all-1g.10gb"), [a100]) == []
    assert compat.check_nodes(mig("all-balanced"), [a100, h200]) == []
    refused = compat.check_nodes(mig("all-1g.18gb"), [a100, h200])
    assert [(f.severity, f.component, f.node) for f in refused] == [("error", "migManager", "a100-0")]
    assert refused[0].message.startswith(
        "mig.config all-1g.18gb asks NVIDIA-A100-SXM4-80GB (ampere) for MIG profile(s) it does not have: "
        "1g.18gb"
    )
    no_entry = compat.check_nodes(mig("all-1g.10gb"), [h200])
    assert "has no entry for NVIDIA-H200 (hopper)" in messages(no_entry)[0]


def test_a_mig_config_on_a_gpu_without_mig_is_an_error(gpu_node: NodeFactory) -> None:
    l40s = facts(gpu_node, name="l40s-0", gpu="l40s")
    findings = compat.check_nodes(mig("all-1g.10gb"), [l40s])
    assert [(f.severity, f.node) for f in compat.blocking(findings)] == [("error", "l40s-0")]
    assert "cannot apply to NVIDIA-L40S (ada-lovelace): it is not MIG-capable" in messages(findings)[0]
    narrowed = mig("all-1g.10gb", "{owner: gpuplan, nodeSelector: {a: b}}")
    assert compat.blocking(compat.check_nodes(narrowed, [l40s])) == []  # the mig-manager's nodes only


def test_a_mig_config_name_the_default_file_lacks() -> None:
    found = messages(compat.check_spec(mig("all-3g.99gb")))
    assert "is not a config of default-mig-parted-config" in found[0]
    assert compat.check_spec(mig("my-layout", "{owner: gpuplan, config: {name: mine}}")) == []


def test_mps_with_a_mig_config_is_an_error() -> None:
    body = EXTERNAL + "  mig: {strategy: single, config: all-1g.10gb}\n  migManager: {owner: gpuplan}\n"
    found = messages(compat.check_spec(make_spec(body + "  devicePlugin: {config: {mps: {replicas: 4}}}\n")))
    assert found == ["MPS does not work on MIG-enabled GPUs, which mig.config all-1g.10gb partitions"]


def test_a_pools_host_driver_hint_names_an_owner_validate_accepts(gpu_node: NodeFactory) -> None:
    """A pool may not set a component's owner: the hint keeps the owner at the stack's key."""
    host = facts(gpu_node, name="gpu-1", gpu="a100-80gb", driver="570.195.03")
    pooled = replace(host, labels={**host.labels, "pool": "old"})
    body = '  nodePools: [{name: old, nodeSelector: {pool: old}, driver: {version: "570.195.03"}}]\n'
    [finding] = compat.blocking(compat.check_nodes(make_spec(body), [pooled]))
    assert finding.message.startswith("node pool old: the node already runs a host driver")
    assert finding.hint == (
        "set driver.owner: external for the whole stack (and its version), or remove the host driver from "
        "the node first"
    )
    with pytest.raises(Exception, match="owner cannot be set in a node pool"):
        make_spec(body.replace("driver: {version", "driver: {owner: external, version"))
