"""rollback_plan against FakeKubernetes and in-memory states: a generation's records become the desired
objects of an ordinary plan (updates back to them, deletes of what the generation lacked, creates of what is
gone), the generation's spec digest and driver version carry over, and the choice of generation refuses what
the history does not hold (pure: no cluster, no files)."""

from __future__ import annotations

from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.errors import StateError
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import Plan
from gpuplan.planner.plan.rollback import choose_generation, desired_objects, rollback_plan, rollback_spec
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import StateFile

DS = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
DS_KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
GFD_DS = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"


def spec_of(plugin: str = "v0.20.1", gfd_owner: str = "none") -> Spec:
    text = lab_spec(
        devicePlugin=f"{{version: {plugin}}}",
        gfd=f"{{owner: {gfd_owner}}}",
        dcgmExporter="{owner: none}",
        validator="{owner: none}",
    )
    return parse_spec(text, filename="gpustack.yaml")


def applied(spec: Spec, cluster: FakeKubernetes, state: StateFile, digest: str) -> StateFile:
    """Apply ``spec`` as the engine would: objects in the cluster, records in the state, leftovers removed,
    and the generation kept."""
    wanted = {str(obj.address) for obj in spec.desired_objects()}
    for address, record in state.resources.items():
        if address not in wanted:
            cluster.remove(refresh.record_key(record.api_version, record.kind, record.namespace, record.name))
            state = state.without(address)
    records = [
        adopt.record_applied(obj, cluster.put(obj.manifest), serial=state.serial + 1)
        for obj in spec.desired_objects()
    ]
    return state.with_records(records).next_serial().with_generation(digest)


def plan_back(spec: Spec, cluster: FakeKubernetes, state: StateFile, serial: int | None = None) -> Plan:
    generation = choose_generation(state, serial)
    target = rollback_spec(spec, generation)
    return rollback_plan(
        spec, state, refresh.refresh(cluster, target, state), generation, created_at="2026-11-29T12:00:00Z"
    )


def image_of(change: Any) -> str:
    return str(change.after["spec"]["template"]["spec"]["containers"][0]["image"])


@pytest.fixture
def cluster(gpu_node: Any) -> FakeKubernetes:
    return FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])


def test_the_previous_generation_comes_back_as_an_update(cluster: FakeKubernetes) -> None:
    state = applied(spec_of("v0.20.1"), cluster, StateFile.new(), "sha256:one")
    state = applied(spec_of("v0.19.0"), cluster, state, "sha256:two")
    plan = plan_back(spec_of("v0.19.0"), cluster, state)
    changes = {c.address: c for c in plan.changes if c.action != "no-op"}
    assert list(changes) == [DS]
    assert changes[DS].action == "update" and image_of(changes[DS]).endswith(":v0.20.1")
    assert [f.path for f in changes[DS].fields] == [
        "spec.template.spec.containers[name=nvidia-device-plugin].image"
    ]
    assert plan.spec_digest == "sha256:one"  # the new generation is generation one again
    assert plan.applicable and plan.state_serial == state.serial


def test_objects_the_generation_lacked_are_deleted_and_missing_ones_created(cluster: FakeKubernetes) -> None:
    state = applied(spec_of(), cluster, StateFile.new(), "sha256:one")
    state = applied(spec_of(gfd_owner="gpuplan"), cluster, state, "sha256:two")
    cluster.remove(DS_KEY)  # someone deleted the plugin since
    plan = plan_back(spec_of(gfd_owner="gpuplan"), cluster, state)
    actions = {c.address: c.action for c in plan.changes if c.action != "no-op"}
    assert actions[DS] == "create"
    assert actions[GFD_DS] == "delete"
    assert {a for addr, a in actions.items() if addr.startswith("gfd/")} == {"delete"}
    assert [c.address for c in plan.changes if c.action == "delete"][
        0
    ] == GFD_DS  # the workload before its RBAC


def test_rolling_back_to_the_newest_generation_plans_nothing(cluster: FakeKubernetes) -> None:
    state = applied(spec_of("v0.20.1"), cluster, StateFile.new(), "sha256:one")
    state = applied(spec_of("v0.19.0"), cluster, state, "sha256:two")
    plan = plan_back(spec_of("v0.19.0"), cluster, state, serial=state.history[-1].serial)
    assert not plan.has_changes


def test_the_generation_is_chosen_from_the_history_or_refused(cluster: FakeKubernetes) -> None:
    with pytest.raises(StateError, match="no earlier applied generation"):
        choose_generation(None, None)
    state = applied(spec_of(), cluster, StateFile.new(), "sha256:one")
    with pytest.raises(StateError, match="no earlier applied generation") as single:
        choose_generation(state, None)
    assert "generations kept: 1" in single.value.detail
    state = applied(spec_of("v0.19.0"), cluster, state, "sha256:two")
    first, second = (g.serial for g in state.history)
    assert [g.number for g in state.history] == [1, 2]
    assert choose_generation(state, None).serial == first
    assert choose_generation(state, 2).serial == second  # --to takes the generation number
    assert choose_generation(state, second).number == 2  # a serial, as --to once took, when unambiguous
    with pytest.raises(StateError, match="no applied generation 99 in the state") as unknown:
        choose_generation(state, 99)
    assert unknown.value.detail == "generations kept: 1, 2"


def test_a_to_that_is_one_generation_s_number_and_another_s_serial_is_refused(
    cluster: FakeKubernetes,
) -> None:
    state = StateFile.new().model_copy(update={"serial": 5})
    state = applied(spec_of(), cluster, state, "sha256:one")
    state = applied(spec_of("v0.19.0"), cluster, state, "sha256:two")
    clash = state.history[0].serial  # 6: made the number of the second generation
    renumbered = state.model_copy(
        update={"history": (state.history[0], state.history[1].model_copy(update={"number": clash}))}
    )
    with pytest.raises(StateError, match=f"--to {clash} is ambiguous"):
        choose_generation(renumbered, clash)


def test_the_rollback_spec_follows_the_generation_owners_and_driver_version(cluster: FakeKubernetes) -> None:
    text = (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: up}\nspec:\n"
        "  driver: {version: 'VERSION'}\n  gfd: {owner: none}\n"
    )
    old = parse_spec(text.replace("VERSION", "580.105.08"), filename="gpustack.yaml")
    state = applied(old, cluster, StateFile.new(), "sha256:one")
    new = parse_spec(
        text.replace("VERSION", "595.91.07").replace("gfd: {owner: none}", "gfd: {}"),
        filename="gpustack.yaml",
    )
    state = applied(new, cluster, state, "sha256:two")
    target = rollback_spec(new, state.history[0])
    assert target.spec.driver.version == "580.105.08"
    assert target.spec.gfd.owner == "none"  # the generation had no GFD objects
    assert target.spec.device_plugin.owner == "gpuplan"
    assert [str(o.address) for o in desired_objects(state.history[0])] == sorted(state.history[0].records)
