"""planner.plan.capacity: per node pool, the devices each resource gets from the nodes' GPU counts and models
and the sharing (time-slicing, MPS) or mig-parted config, from the applied generation's spec to the plan's."""

from __future__ import annotations

from gpuplan.modules import mig_parted
from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.plan import capacity
from gpuplan.planner.plan.model import CapacityChange, CapacityTotal
from gpuplan.planner.spec.model import Spec, parse_spec

A100, H100, L40S = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"
HEADER = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: fleet}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
"""


def node(name: str, product: str, count: int | None, pool: str | None = None) -> NodeFacts:
    labels = {"nvidia.com/gpu.product": product, **({"pool": pool} if pool else {})}
    return NodeFacts(name, labels=labels, has_nvidia_gpu=True, gpu_product=product, gpu_count=count)


def spec(body: str = "") -> Spec:
    return parse_spec(HEADER + body, filename="gpustack.yaml")


def pools(*entries: str) -> str:
    return "  nodePools:\n" + "".join(f"    - {entry}\n" for entry in entries)


INFERENCE = "{name: inference, nodeSelector: {pool: inference}, devicePlugin: {config: {%s: {replicas: 4}}}}"
TRAINING = "{name: training, nodeSelector: {pool: training}, mig: {config: %s}}"
MIG = "  mig: {strategy: %s}\n  migManager: {owner: gpuplan}\n"
FLEET = [
    node("h100-a", H100, 8, "inference"),
    node("l40s-a", L40S, 4, "inference"),
    node("a100-a", A100, 8, "training"),
    node("a100-b", A100, 8, "training"),
    node("rtx", "NVIDIA-GeForce-RTX-3060", 1),
]


def changed(before: Spec | None, after: Spec, facts: list[NodeFacts]) -> list[str]:
    members: dict[str | None, list[str]] = {}
    for fact in facts:
        members.setdefault(fact.labels.get("pool"), []).append(fact.name)
    old = capacity.unshared(facts) if before is None else capacity.of_spec(before, facts)
    return [c.describe() for c in capacity.changes(old, capacity.of_spec(after, facts), members)]


def test_time_slicing_multiplies_each_pool_nodes_gpus_by_its_replicas() -> None:
    after = spec(pools(INFERENCE % "timeSlicing"))
    assert changed(None, after, FLEET) == ["inference: nvidia.com/gpu 12 -> 48 (time-slicing x4)"]


def test_mps_counts_the_same_and_says_mps() -> None:
    after = spec(pools(INFERENCE % "mps"))
    assert changed(None, after, FLEET) == ["inference: nvidia.com/gpu 12 -> 48 (MPS x4)"]


def test_a_mig_pool_gets_the_configs_instances_per_gpu_and_gives_up_its_whole_gpus() -> None:
    after = spec(MIG % "mixed" + pools(TRAINING % "all-1g.10gb"))
    assert changed(None, after, FLEET) == [
        "training: nvidia.com/gpu 16 -> 0 (MIG all-1g.10gb)",
        "training: nvidia.com/mig-1g.10gb 0 -> 112 (MIG all-1g.10gb)",
    ]


def test_a_mixed_geometry_is_one_line_per_profile_and_single_counts_instances_as_gpus() -> None:
    mixed = changed(None, spec(MIG % "mixed" + pools(TRAINING % "all-balanced")), FLEET)
    assert mixed == [
        "training: nvidia.com/gpu 16 -> 0 (MIG all-balanced)",
        "training: nvidia.com/mig-1g.10gb 0 -> 32 (MIG all-balanced)",
        "training: nvidia.com/mig-2g.20gb 0 -> 16 (MIG all-balanced)",
        "training: nvidia.com/mig-3g.40gb 0 -> 16 (MIG all-balanced)",
    ]
    single = changed(None, spec(MIG % "single" + pools(TRAINING % "all-1g.10gb")), FLEET)
    assert single == ["training: nvidia.com/gpu 16 -> 112 (MIG all-1g.10gb, single strategy)"]


def test_sharing_and_mig_pools_side_by_side_and_a_stack_wide_change_on_the_nodes_of_no_pool() -> None:
    both = spec(MIG % "mixed" + pools(INFERENCE % "timeSlicing", TRAINING % "all-1g.10gb"))
    assert changed(None, both, FLEET) == [
        "inference: nvidia.com/gpu 12 -> 48 (time-slicing x4)",
        "training: nvidia.com/gpu 16 -> 0 (MIG all-1g.10gb)",
        "training: nvidia.com/mig-1g.10gb 0 -> 112 (MIG all-1g.10gb)",
    ]
    # the stack shares too: the pools' nodes take their own config, the nodes of no pool the stack's
    stack_wide = spec(
        "  devicePlugin: {config: {timeSlicing: {replicas: 2}}}\n"
        + MIG % "mixed"
        + pools(INFERENCE % "timeSlicing", TRAINING % "all-1g.10gb")
    )
    assert changed(both, stack_wide, FLEET) == ["(no pool): nvidia.com/gpu 1 -> 2 (time-slicing x2)"]


def test_before_is_the_applied_spec_and_nothing_changes_when_it_is_the_same() -> None:
    four = spec(pools(INFERENCE % "timeSlicing"))
    eight = spec(pools((INFERENCE % "timeSlicing").replace("replicas: 4", "replicas: 8")))
    assert changed(four, four, FLEET) == []
    assert changed(four, eight, FLEET) == ["inference: nvidia.com/gpu 48 -> 96 (time-slicing x8)"]
    # the pool given up: its GPUs back to one device each
    assert changed(four, spec(), FLEET) == ["inference: nvidia.com/gpu 48 -> 12 (no sharing)"]


def test_nodes_whose_gpus_are_not_known_yet_are_not_counted_and_said_so() -> None:
    after = spec(pools(INFERENCE % "timeSlicing"))
    partly = [node("h100-a", H100, 8, "inference"), node("new", H100, None, "inference")]
    assert changed(None, after, partly) == [
        "inference: nvidia.com/gpu 8 -> 32 (time-slicing x4; 1 node not counted: GPUs not known yet)"
    ]
    unknown = [node("new", H100, None, "inference")]
    assert changed(None, after, unknown) == [
        "inference: nvidia.com/gpu 1 -> 4 per GPU (time-slicing x4; the GPUs of 1 node are not known yet)"
    ]
    [entry] = capacity.changes(
        capacity.unshared(partly), capacity.of_spec(after, partly), {"inference": ["h100-a", "new"]}
    )
    assert entry == CapacityChange(
        pool="inference",
        resource="nvidia.com/gpu",
        before=1,
        after=4,
        how="time-slicing x4",
        nodes=2,
        total=CapacityTotal(before=8, after=32, gpus=8, uncounted=["new"]),
    )


def test_no_device_plugin_or_a_config_map_gpuplan_does_not_render_gives_no_capacity() -> None:
    assert capacity.of_spec(spec("  devicePlugin: {owner: none}\n"), FLEET) == {}
    assert capacity.of_spec(spec("  devicePlugin: {config: {name: my-config}}\n"), FLEET) == {}


def test_mig_parted_counts_the_devices_a_config_asks_of_a_gpu() -> None:
    gpu = mig_parted.GPUS[A100]
    assert mig_parted.devices_asked("all-1g.10gb", gpu) == {"1g.10gb": 7}
    assert mig_parted.devices_asked("all-balanced", gpu) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert mig_parted.devices_asked("all-disabled", gpu) == {}
