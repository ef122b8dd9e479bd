"""Node pools (design §7.1): the spec's rules, the rendered DaemonSets, membership, compatibility per pool
and the gates' targeting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuplan.errors import ConfigError
from gpuplan.modules.base import HealthCheck
from gpuplan.planner import placement, pools
from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.health import gates, nodes
from gpuplan.planner.spec import compat
from gpuplan.planner.spec import model as spec_model
from gpuplan.planner.spec.pools import MAX_EXCLUSION_TERMS, exclusion_terms

NodeFactory = Callable[..., dict[str, Any]]  # the gpu_node fixture of conftest.py

VOLTA_POOL = """  driver: {version: "595.91.07"}
  nodePools:
    - name: volta
      nodeSelector: {nvidia.com/gpu.family: volta}
      driver: {version: "580.105.08", upgradePolicy: {maxParallelUpgrades: 2}}
    - name: inference
      nodeSelector: {pool: inference}
      devicePlugin: {version: v0.17.4}
"""


def make_spec(body: str) -> spec_model.Spec:
    text = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: t}\nspec:\n" + body
    return spec_model.parse_spec(text, filename="gpustack.yaml")


def daemonsets(spec: spec_model.Spec) -> dict[str, dict[str, Any]]:
    return {o.address.name: dict(o.manifest) for o in spec.desired_objects() if o.address.kind == "DaemonSet"}


def pod_spec(ds: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def test_a_pool_gets_its_own_driver_daemonset_and_the_default_one_stays_off_its_nodes(
    gpu_node: NodeFactory,
) -> None:
    rendered = daemonsets(make_spec(VOLTA_POOL))
    volta, default = rendered["nvidia-driver-daemonset-volta"], rendered["nvidia-driver-daemonset"]
    assert volta["metadata"]["labels"]["app"] == "nvidia-driver-daemonset"
    assert volta["metadata"]["labels"]["gpuplan.io/pool"] == "volta"
    assert volta["spec"]["selector"] == {
        "matchLabels": {"app": "nvidia-driver-daemonset", "gpuplan.io/pool": "volta"}
    }
    # a pool by GPU model: its DaemonSet selects the pool label gpuplan writes on the nodes of that model
    # (decided from NFD's PCI id before GFD runs), first in the apply
    assert pod_spec(volta)["nodeSelector"] == {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "gpuplan.io/pool": "volta",
    }
    rules = [rule for rule in make_spec(VOLTA_POOL).label_rules() if "gpuplan.io/pool" in rule.wanted.labels]
    assert [(r.pool, r.component, dict(r.wanted.labels), r.at_once) for r in rules] == [
        ("volta", "driver", {"gpuplan.io/pool": "volta"}, True)
    ]
    assert pod_spec(volta)["containers"][0]["image"] == "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04"
    assert default["spec"]["selector"] == {"matchLabels": {"app": "nvidia-driver-daemonset"}}
    assert "gpuplan.io/pool" not in default["metadata"]["labels"]
    volta_node = gpu_node("v100", gpu="v100", labels={"gpuplan.io/pool": "volta"})
    hopper_node = gpu_node("h100", gpu="h100-80gb")
    assert placement.runs_on(pod_spec(volta), volta_node)
    assert not placement.runs_on(pod_spec(volta), hopper_node)
    assert placement.runs_on(pod_spec(default), hopper_node)
    assert not placement.runs_on(pod_spec(default), volta_node)
    # the device plugin's pool has its own plugin DaemonSet; the driver's default ignores that pool
    assert "nvidia-device-plugin-daemonset-inference" in rendered
    assert "nvidia-driver-daemonset-inference" not in rendered
    inference = gpu_node("inf", gpu="h100-80gb", labels={"pool": "inference"})
    assert placement.runs_on(pod_spec(default), inference)
    assert not placement.runs_on(pod_spec(rendered["nvidia-device-plugin-daemonset"]), inference)


def test_a_pool_inherits_the_stack_keys_it_does_not_set() -> None:
    spec = make_spec(
        '  driver: {version: "595.91.07", upgradePolicy: {maxUnavailable: "50%"}}\n'
        "  nodePools:\n    - name: volta\n      nodeSelector: {pool: v}\n"
        '      driver: {version: "580.105.08", upgradePolicy: {maxParallelUpgrades: 2}}\n'
    )
    pool = spec.pool("volta")
    assert pool is not None
    config = spec_model.pool_driver(spec.spec, pool)
    assert config.version == "580.105.08"
    assert config.upgrade_policy.max_parallel_upgrades == 2
    assert config.upgrade_policy.max_unavailable == "50%"


@pytest.mark.parametrize(
    ("pools_yaml", "words"),
    [
        (
            "    - {name: a, nodeSelector: {x: '1'}, driver: {version: 580.105.08}}\n"
            "    - {name: a, nodeSelector: {x: '2'}}\n",
            "node pool name 'a' is used twice",
        ),
        (
            "    - {name: a, nodeSelector: {x: '1'}, driver: {owner: external}}\n",
            "driver.owner cannot be set",
        ),
        ("    - {name: a, nodeSelector: {}}\n", "nodeSelector"),
        ("    - {name: Bad_Name, nodeSelector: {x: '1'}}\n", "name"),
    ],
)
def test_bad_pools_are_errors_naming_the_field(pools_yaml: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_spec("  nodePools:\n" + pools_yaml)
    assert words in str(caught.value) + (caught.value.hint or "")
    assert "gpustack.yaml:" in (caught.value.where or "")


def test_the_exclusion_of_many_multi_label_pools_is_bounded() -> None:
    selectors = [pools.PoolSelector(f"p{i}", {"a": str(i), "b": str(i)}) for i in range(7)]
    assert len(exclusion_terms(selectors[:6])) <= MAX_EXCLUSION_TERMS
    with pytest.raises(ValueError, match="more than 64"):
        exclusion_terms(selectors)
    body = "  nodePools:\n" + "".join(
        f"    - {{name: p{i}, nodeSelector: {{a: '{i}', b: '{i}'}}, driver: {{version: 580.105.08}}}}\n"
        for i in range(7)
    )
    with pytest.raises(ConfigError, match="node selector terms"):
        make_spec(body)


def test_two_single_label_pools_exclude_with_one_term() -> None:
    terms = exclusion_terms([pools.PoolSelector("a", {"k": "1"}), pools.PoolSelector("b", {"k": "2"})])
    assert terms == [[{"key": "k", "operator": "NotIn", "values": ["1", "2"]}]]


def test_a_node_two_pools_select_is_an_error_naming_both(gpu_node: NodeFactory) -> None:
    spec = make_spec(
        "  nodePools:\n"
        "    - {name: volta, nodeSelector: {nvidia.com/gpu.family: volta}, driver: {version: 580.105.08}}\n"
        "    - {name: big, nodeSelector: {size: big}, driver: {version: 580.105.08}}\n"
    )
    node = NodeFacts.from_node(gpu_node("v100-a", gpu="v100", labels={"size": "big"}))
    errors = compat.blocking(compat.check_nodes(spec, [node]))
    assert [f.message for f in errors] == [
        "node v100-a is selected by node pools 'volta' and 'big'; a node may belong to one pool only"
    ]
    assert errors[0].node == "v100-a"


def test_compatibility_is_judged_with_each_pools_driver(gpu_node: NodeFactory) -> None:
    volta = NodeFacts.from_node(gpu_node("v100-a", gpu="v100"))
    hopper = NodeFacts.from_node(gpu_node("h100-a", gpu="h100-80gb"))
    assert compat.blocking(compat.check_nodes(make_spec(VOLTA_POOL), [volta, hopper])) == []
    without = make_spec(
        '  driver: {version: "595.91.07"}\n  nodePools:\n'
        "    - {name: other, nodeSelector: {x: y}, driver: {version: 580.105.08}}\n"
    )
    errors = compat.blocking(compat.check_nodes(without, [volta, hopper]))
    assert [(f.node, f.message.split(":")[0]) for f in errors] == [
        ("v100-a", "(no node pool) driver 595.91.07 does not support Tesla-V100-SXM2-32GB (volta)")
    ]
    assert "give the volta nodes a node pool with driver 580.x" in errors[0].hint
    wrong_pool = make_spec(
        "  nodePools:\n"
        "    - {name: volta, nodeSelector: {nvidia.com/gpu.family: volta}, driver: {version: 595.91.07}}\n"
    )
    errors = compat.blocking(compat.check_nodes(wrong_pool, [volta]))
    assert errors[0].message.startswith("node pool volta: driver 595.91.07 does not support")
    assert "nodePools[volta].driver.version" in errors[0].hint


def test_membership_by_labels() -> None:
    selectors = [pools.PoolSelector("a", {"k": "1"}), pools.PoolSelector("b", {"j": "2"})]
    found = pools.membership(selectors, [("n1", {"k": "1"}), ("n2", {"j": "2", "k": "1"}), ("n3", {})])
    assert found.pool_of == {"n1": "a"}
    assert [(o.node, o.pools) for o in found.overlaps] == [("n2", ("a", "b"))]


def test_each_pools_gates_target_only_its_nodes_and_expect_its_version(gpu_node: NodeFactory) -> None:
    spec = make_spec(VOLTA_POOL)
    checks = spec.health_checks()["driver"]
    by_pool = {(c.kind, c.params.get("pool")): c for c in checks}
    assert by_pool[("driver-version", "volta")].params["version"] == "580.105.08"
    assert by_pool[("driver-version", None)].params["version"] == "595.91.07"
    v100 = gpu_node("v100", gpu="v100", driver="580.105.08")
    h100 = gpu_node("h100", gpu="h100-80gb", driver="595.91.07")
    for pool, check in (
        (None, by_pool[("driver-version", None)]),
        ("volta", by_pool[("driver-version", "volta")]),
    ):
        observation = gates.Observation(
            nodes=(v100, h100),
            pool_selector=check.params.get("poolSelector") or {},
            excluded=tuple(check.params.get("excludeSelectors") or ()),
        )
        names = [n["metadata"]["name"] for n in nodes.targeted_nodes(observation)]
        assert names == (["v100"] if pool else ["h100"])
        assert gates.evaluate(HealthCheck(check.kind, check.params), observation).state == "passed"
    gfd = gates.Observation(nodes=(v100,), expected_driver="595.91.07", pool_drivers=spec.pool_drivers())
    assert nodes.gfd_labels({"labels": []}, v100, gfd) is None


def test_a_mig_pool_without_a_mig_manager_and_a_gfd_selector_are_warnings() -> None:
    spec = make_spec(
        "  nodePools:\n"
        "    - {name: training, nodeSelector: {pool: training}, mig: {config: all-1g.10gb}}\n"
        "    - {name: big, nodeSelector: {nvidia.com/gpu.memory: '81559'}, driver: {version: 580.105.08}}\n"
        "    - {name: volta, nodeSelector: {nvidia.com/gpu.family: volta}, driver: {version: 580.105.08}}\n"
    )
    findings = compat.check_spec(spec)
    assert [f.severity for f in findings] == ["warning", "warning"]
    assert "nvidia.com/mig.config=all-1g.10gb" in findings[0].message and "mig-manager" in findings[0].message
    # gpu.memory is GFD's alone; the GPU model (gpu.family) gpuplan knows from NFD's PCI id before GFD
    assert "node pool big selects nodes by nvidia.com/gpu.memory" in findings[1].message
    assert "GPU Feature Discovery writes only once a driver runs" in findings[1].message
    assert spec.node_labels() == {
        "training": {"nvidia.com/mig.config": "all-1g.10gb"},
        "volta": {"gpuplan.io/pool": "volta"},
    }


def test_the_graph_shows_the_pools() -> None:
    from gpuplan.planner import graph

    pools_yaml = VOLTA_POOL.replace("{version: v0.17.4}", "{config: {timeSlicing: {replicas: 2}}}")
    text = graph.build(make_spec(pools_yaml))
    lines = text.to_text().splitlines()
    assert "node pool volta: overrides driver; labels its nodes gpuplan.io/pool=volta" in lines
    assert (
        "node pool inference: overrides devicePlugin; labels its nodes "
        "nvidia.com/device-plugin.config=inference"
    ) in lines
    assert '"pool:volta" -> "driver"' in text.to_dot()


def test_a_pool_sharing_config_is_a_key_of_the_one_config_map() -> None:
    spec = make_spec(
        "  nodePools:\n"
        "    - {name: inference, nodeSelector: {pool: inference},"
        " devicePlugin: {config: {timeSlicing: {replicas: 4}}}}\n"
    )
    objects = {str(o.address): o.manifest for o in spec.desired_objects()}
    config_map = objects["devicePlugin/ConfigMap/gpu-operator/nvidia-device-plugin-config"]
    assert sorted(config_map["data"]) == ["default", "inference"]
    assert "replicas: 4" in config_map["data"]["inference"] and "sharing" not in config_map["data"]["default"]
    assert "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset-inference" not in objects
    plugin = objects["devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"]
    env = {
        e["name"]: e.get("value")
        for c in plugin["spec"]["template"]["spec"]["initContainers"]
        for e in c.get("env", [])
    }
    assert env["DEFAULT_CONFIG"] == "default" and env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    with pytest.raises(ConfigError, match="must be timeSlicing or mps"):
        make_spec(
            "  nodePools:\n    - {name: a, nodeSelector: {x: y}, devicePlugin: {config: {name: mine}}}\n"
        )


def test_the_schema_documents_node_pools() -> None:
    schema = spec_model.json_schema()
    pools_schema = schema["$defs"]["StackSpec"]["properties"]["nodePools"]
    assert pools_schema["items"] == {"$ref": "#/$defs/NodePool"}
    assert set(schema["$defs"]["NodePool"]["properties"]) == {
        "name",
        "nodeSelector",
        "driver",
        "devicePlugin",
        "mig",
    }
    assert "mig-parted" in schema["$defs"]["PoolMig"]["properties"]["config"]["description"]


MIG_POOLS = """  mig: {strategy: mixed, config: all-2g.20gb}
  migManager: {owner: gpuplan}
  nodePools:
    - {name: training, nodeSelector: {pool: training}, mig: {config: all-1g.10gb}}
    - {name: inference, nodeSelector: {pool: inference}, devicePlugin: {config: {timeSlicing: {replicas: 2}}}}
"""
PCI = {"feature.node.kubernetes.io/pci-10de.present": "true"}
PRESENT = {"nvidia.com/gpu.present": "true"}


def _labelled(pool: str | None, capable: str | None) -> dict[str, str]:
    labels = dict(PCI)
    if pool is not None:
        labels["pool"] = pool
    if capable is not None:
        labels["nvidia.com/mig.capable"] = capable
    return labels


def test_one_rule_set_gives_each_node_its_pools_mig_config_and_none_where_gfd_says_no_mig() -> None:
    spec = make_spec(MIG_POOLS)
    nodes = [
        ("train-a100", _labelled("training", "true")),
        ("train-l4", _labelled("training", "false")),
        ("infer-a100", _labelled("inference", "true")),
        ("plain-a100", _labelled(None, "true")),
        ("plain-new", _labelled(None, None)),  # GFD has not labelled it yet
    ]
    rules = spec.label_rules()
    members = pools.membership(spec.pool_selectors(), nodes)
    deploy = {"nvidia.com/gpu.deploy.mig-manager": "true"}
    # every GPU node (NFD's PCI label) gets the operator's gpu.present, GFD's labels or not
    assert pools.wanted_labels(rules, members, nodes) == {
        "train-a100": {**PRESENT, **deploy, "nvidia.com/mig.config": "all-1g.10gb"},
        "train-l4": PRESENT,
        "plain-new": PRESENT,
        "infer-a100": {
            **PRESENT,
            **deploy,
            "nvidia.com/mig.config": "all-2g.20gb",
            "nvidia.com/device-plugin.config": "inference",
        },
        "plain-a100": {**PRESENT, **deploy, "nvidia.com/mig.config": "all-2g.20gb"},
    }
    # what the graph says each pool labels: only what differs from the nodes of no pool
    assert spec.node_labels() == {
        "inference": {"nvidia.com/device-plugin.config": "inference"},
        "training": {"nvidia.com/mig.config": "all-1g.10gb"},
    }
    assert pools.written_with(rules, "nvidia.com/mig.config") == {"nvidia.com/mig.config.state": "pending"}
    assert pools.written_with(rules, "nvidia.com/device-plugin.config") == {}
    assert [
        pools.component_of(rules, label)
        for label in ("nvidia.com/mig.config", "nvidia.com/device-plugin.config")
    ] == [
        "migManager",
        "devicePlugin",
    ]
    assert [(rule.pool, rule.follows_gfd) for rule in rules if rule.component == "devicePlugin"] == [
        ("inference", False)
    ]


def test_a_label_gpuplan_wrote_stays_while_gfds_labels_are_gone_and_goes_once_gfd_says_no() -> None:
    spec = make_spec(MIG_POOLS)
    rules = spec.label_rules()
    mig_labels = {"nvidia.com/gpu.deploy.mig-manager": "true", "nvidia.com/mig.config": "all-1g.10gb"}
    written = {"train-a100": mig_labels}

    def removals(capable: str | None) -> list[tuple[str, str | None]]:
        nodes = [("train-a100", {**_labelled("training", capable), **mig_labels})]
        members = pools.membership(spec.pool_selectors(), nodes)
        work = pools.label_work(
            pools.wanted_labels(rules, members, nodes),
            members,
            nodes,
            written,
            pools.if_absent_labels(rules),
            pools.unjudged_labels(rules, members, nodes),
        )
        return [(item.label, item.value) for item in work if item.value is None]

    # GFD paused by mig-manager (or restarting): no mig.capable label, nothing to judge by
    assert removals(None) == []
    assert removals("true") == []
    assert removals("false") == [("nvidia.com/gpu.deploy.mig-manager", None), ("nvidia.com/mig.config", None)]


def test_a_mig_pool_is_judged_by_its_own_mig_config_gate() -> None:
    checks = make_spec(MIG_POOLS).health_checks()["migManager"]
    configs = {
        (check.params.get("pool"), check.params["config"]) for check in checks if check.kind == "mig-config"
    }
    assert configs == {(None, "all-2g.20gb"), ("training", "all-1g.10gb")}
    stack = next(c for c in checks if c.kind == "mig-config" and "pool" not in c.params)
    assert stack.params["excludeSelectors"] == [{"pool": "training"}]
    # a reconfiguration pauses GFD on the pool's nodes: its gates wait for its labels again
    assert [c.kind for c in checks if c.params.get("pool") == "training"] == ["mig-config", "gfd-labels"]


def test_without_a_gpuplan_mig_manager_only_a_pools_own_mig_config_is_written() -> None:
    spec = make_spec(
        "  migManager: {owner: external}\n"
        "  nodePools:\n    - {name: training, nodeSelector: {pool: training}, mig: {config: all-1g.10gb}}\n"
    )
    nodes = [("train", _labelled("training", "true")), ("plain", _labelled(None, "true"))]
    members = pools.membership(spec.pool_selectors(), nodes)
    assert pools.wanted_labels(spec.label_rules(), members, nodes) == {
        "train": {**PRESENT, "nvidia.com/mig.config": "all-1g.10gb"},
        "plain": PRESENT,
    }


def test_a_pool_sets_its_own_kernel_module_type(gpu_node: NodeFactory) -> None:
    """The stack's open modules for its Hopper nodes, the volta pool's proprietary ones for its V100s: each
    DaemonSet installs its own, and each pool is judged with its own."""
    spec = make_spec(
        '  driver: {version: "580.105.08", kernelModuleType: open}\n  nodePools:\n'
        "    - {name: volta, nodeSelector: {nvidia.com/gpu.family: volta},"
        " driver: {kernelModuleType: proprietary}}\n"
    )
    rendered = daemonsets(spec)

    def module_type(name: str) -> str:
        env = {e["name"]: e.get("value") for e in pod_spec(rendered[name])["containers"][0]["env"]}
        return str(env["KERNEL_MODULE_TYPE"])

    assert module_type("nvidia-driver-daemonset-volta") == "proprietary"
    assert module_type("nvidia-driver-daemonset") == "open"
    volta = NodeFacts.from_node(gpu_node("v100-a", gpu="v100"))
    hopper = NodeFacts.from_node(gpu_node("h100-a", gpu="h100-80gb"))
    assert compat.blocking(compat.check_nodes(spec, [volta, hopper])) == []
    stack_only = make_spec('  driver: {version: "580.105.08", kernelModuleType: open}\n')
    [refused] = compat.blocking(compat.check_nodes(stack_only, [volta, hopper]))
    assert refused.node == "v100-a" and "the open kernel modules do not support it" in refused.message
