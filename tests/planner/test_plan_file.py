"""Saved plans: atomic 0600 writes without credentials (fingerprints included), reading with clear errors, and
the freshness and applicability checks apply makes (stale state serial or lineage, changed/deleted/new live
objects). tests/planner/test_plan_fresh.py covers what counts as a changed object."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.errors import ConfigError, StalePlanError, StateError
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan import planfile
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ClusterSnapshot, ObjectKey
from gpuplan.state.model import StateFile

SPEC = lab_spec(driver="{owner: external}")
DS_KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
HAND = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}]}
        }
    },
}


@pytest.fixture
def spec() -> Spec:
    return parse_spec(SPEC, filename="gpustack.yaml")


@pytest.fixture
def world(spec: Spec, gpu_node: Any) -> tuple[FakeKubernetes, StateFile]:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", driver="580.105.08")])
    records = [
        adopt.record_applied(obj, cluster.put(obj.manifest), serial=1) for obj in spec.desired_objects()
    ]
    return cluster, StateFile.new().with_records(records).next_serial()


def snapshot_of(cluster: FakeKubernetes, spec: Spec, state: StateFile | None) -> ClusterSnapshot:
    return refresh.refresh(cluster, spec, state)


def planned(spec: Spec, cluster: FakeKubernetes, state: StateFile | None) -> Plan:
    return make_plan(spec, state, snapshot_of(cluster, spec, state), created_at="2026-11-29T12:00:00Z")


def test_write_read_round_trip_mode_0600(tmp_path: Path, spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    path = tmp_path / "plan.json"
    planfile.write(path, plan)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert planfile.read(path) == plan
    assert plan.fingerprints and plan.fingerprints == snapshot_of(cluster, spec, state).content_fingerprints()
    saved = json.loads(path.read_text())["fingerprints"][DS_KEY.ref]
    assert set(saved) == {"uid", "generation", "content"} and saved["generation"] == 1
    assert json.loads(path.read_text())["format_version"] == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"], "no temporary file is left behind"


def test_a_fresh_plan_passes_both_checks(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    planfile.check(plan, state, snapshot_of(cluster, spec, state))


def test_a_changed_state_serial_makes_the_plan_stale(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    newer = state.tainted("devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset").next_serial()
    with pytest.raises(StalePlanError) as caught:
        planfile.check_fresh(plan, newer, snapshot_of(cluster, spec, newer))
    assert caught.value.summary == "Saved plan is stale"
    assert f"state serial {state.serial} -> {newer.serial}" in caught.value.detail


def test_another_lineage_does_not_match(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    other = StateFile.new().with_records(state.resources.values()).next_serial()
    with pytest.raises(StalePlanError, match="does not match the given state"):
        planfile.check_fresh(plan, other, snapshot_of(cluster, spec, other))


def test_a_first_plan_is_stale_once_a_state_exists(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, None)
    with pytest.raises(StalePlanError, match="Saved plan is stale"):
        planfile.check_fresh(plan, state, snapshot_of(cluster, spec, state))


def test_a_live_object_that_moved_makes_the_plan_stale(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    live = cluster.read(DS_KEY)
    assert live is not None
    edited = copy.deepcopy(dict(live.manifest))
    edited["metadata"]["labels"]["team"] = "ml"
    moved = cluster.put(edited)
    with pytest.raises(StalePlanError) as caught:
        planfile.check_fresh(plan, state, snapshot_of(cluster, spec, state))
    assert moved.generation == live.generation, "a label is not spec: the generation stays"
    assert f"{DS_KEY.ref} changed after the plan was made: its metadata.labels changed" in caught.value.detail


def test_deleted_and_new_objects_make_the_plan_stale(spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    cluster.remove(DS_KEY)
    cluster.put(HAND)
    with pytest.raises(StalePlanError) as caught:
        planfile.check_fresh(plan, state, snapshot_of(cluster, spec, state))
    assert f"{DS_KEY.ref} was deleted after the plan was made" in caught.value.detail
    assert "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset appeared" in caught.value.detail


def test_a_plan_with_a_conflict_is_refused_by_apply(tmp_path: Path, spec: Spec, gpu_node: Any) -> None:
    """Saved and shown fine, but check() refuses it and names the resolution."""
    cluster = FakeKubernetes([HAND], nodes=[gpu_node()])
    plan = planned(spec, cluster, None)
    planfile.write(tmp_path / "p.json", plan)
    saved = planfile.read(tmp_path / "p.json")
    with pytest.raises(planfile.PlanNotApplicableError) as caught:
        planfile.check(saved, None, snapshot_of(cluster, spec, None))
    assert "kube-system/nvidia-device-plugin-daemonset" in caught.value.detail
    assert "gpuplan import -f gpustack.yaml" in caught.value.hint


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"hello": 1}', "not a gpuplan saved plan"),
        ('{"format_version": "9", "changes": []}', "format '9' is not supported"),
        ('{"format_version": "1", "changes": "nope"}', "malformed at"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["not-json", "not-a-plan", "other-format", "malformed", "nested-too-deeply"],
)
def test_malformed_plan_files_are_config_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        planfile.read(path)


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the saved plan"):
        planfile.read(tmp_path / "absent.json")


def test_a_plan_holding_credentials_is_not_written(tmp_path: Path, spec: Spec, world: Any) -> None:
    cluster, state = world
    plan = planned(spec, cluster, state)
    change = plan.changes[0]
    leaky = change.model_copy(update={"after": {**(change.after or {}), "password": "hunter2"}})
    with pytest.raises(StateError, match="credentials"):
        planfile.write(tmp_path / "p.json", plan.model_copy(update={"changes": (leaky,)}))
    assert not (tmp_path / "p.json").exists()


def test_a_plan_saved_without_undo_notes_gets_them_when_read(tmp_path: Path, spec: Spec, world: Any) -> None:
    """A plan saved before every delete and replace carried its undo note: the planner gives each the note
    it has now when the plan is read, so the views read notes from the document and infer nothing."""
    cluster, state = world
    plan = make_plan(spec, state, snapshot_of(cluster, spec, state), destroy=True, created_at="now")
    noted = {change.address: change.undo for change in plan.changes}
    assert noted and all(noted.values()), "every delete of a destroy plan has its note"
    document = plan.document()
    for change in document["changes"]:
        change["undo"] = ""
    path = tmp_path / "old.plan"
    path.write_text(json.dumps(document))
    assert {change.address: change.undo for change in planfile.read(path).changes} == noted
