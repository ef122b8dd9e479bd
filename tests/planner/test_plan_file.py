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
from gpuplan.planner.plan import planfile, sealed
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ClusterSnapshot, ObjectKey
from gpuplan.state.model import StateFile

SPEC = lab_spec(driver="{owner: external}")
NEWER = lab_spec(driver="{owner: external}", devicePlugin="{version: v0.20.0}")
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
    planfile.write(path, plan, spec_text=SPEC)
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
    planfile.write(tmp_path / "p.json", plan, spec_text=SPEC)
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
        ('{"format_version": "1", "changes": "nope"}', "carries no seal"),
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
        planfile.write(tmp_path / "p.json", plan.model_copy(update={"changes": (leaky,)}), spec_text=SPEC)
    assert not (tmp_path / "p.json").exists()


def test_a_plan_saved_without_undo_notes_gets_them_when_read(spec: Spec, world: Any) -> None:
    """A plan saved before every delete and replace carried its undo note: the planner gives each the note
    it has now when the plan is read, so the views read notes from the document and infer nothing."""
    cluster, state = world
    plan = make_plan(spec, state, snapshot_of(cluster, spec, state), destroy=True, created_at="now")
    noted = {change.address: change.undo for change in plan.changes}
    assert noted and all(noted.values()), "every delete of a destroy plan has its note"
    document = plan.document()
    for change in document["changes"]:
        change["undo"] = ""
    assert {change.address: change.undo for change in planfile.loads(json.dumps(document)).changes} == noted


def saved_document(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


@pytest.fixture
def sealed_plan(tmp_path: Path, spec: Spec, world: Any) -> tuple[Path, Plan, FakeKubernetes]:
    """A saved plan with changes: the device plugin's image moved to another version."""
    cluster, state = world
    newer = parse_spec(NEWER, filename="gpustack.yaml")
    plan = make_plan(newer, state, snapshot_of(cluster, newer, state), created_at="2026-12-01T00:00:00Z")
    assert plan.has_changes
    path = tmp_path / "p.plan"
    planfile.write(path, plan, spec_text=NEWER)
    return path, plan, cluster


def test_a_plan_file_edited_after_it_was_saved_is_refused(sealed_plan: Any) -> None:
    path, _, _ = sealed_plan
    assert "k8s-device-plugin:v0.20.0" in path.read_text()
    path.write_text(path.read_text().replace("k8s-device-plugin:v0.20.0", "k8s-device-plugin:v6.6.6"))
    with pytest.raises(ConfigError, match="modified after it was saved") as caught:
        planfile.read_saved(path)
    assert caught.value.where == str(path) and "gpuplan plan" in caught.value.hint


def test_a_dropped_change_is_refused(sealed_plan: Any) -> None:
    path, _, _ = sealed_plan
    document = saved_document(path)
    document["changes"] = document["changes"][1:]
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="modified after it was saved"):
        planfile.read_saved(path)


def test_a_consistent_edit_with_a_recomputed_digest_is_refused_by_the_re_render(sealed_plan: Any) -> None:
    """Whoever fixes the digest too is caught by rendering the plan's spec again: the edited object is not
    what that spec renders."""
    path, plan, cluster = sealed_plan
    document = saved_document(path)
    for change in document["changes"]:
        if change["after"] and change["kind"] == "DaemonSet":
            change["after"]["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:latest"
    del document[sealed.DIGEST_KEY]
    path.write_text(json.dumps(sealed.seal(document, document.pop(sealed.SPEC_KEY))))
    saved = planfile.read_saved(path)
    with pytest.raises(ConfigError, match="its changes are not what its spec renders") as caught:
        sealed.check_content(saved, snapshot_of(cluster, saved.spec, None), source=str(path))
    assert "its planned object is not what the spec renders" in caught.value.detail


def test_an_untouched_plan_passes_every_check(sealed_plan: Any) -> None:
    path, plan, cluster = sealed_plan
    saved = planfile.read_saved(path)
    assert saved.plan == plan and saved.spec.spec.device_plugin.version == "v0.20.0"
    sealed.check_content(saved, snapshot_of(cluster, saved.spec, None), source=str(path))


def test_another_spec_given_with_f_is_refused_unless_allowed(sealed_plan: Any, spec: Spec) -> None:
    path, _, _ = sealed_plan
    saved = planfile.read_saved(path)
    with pytest.raises(ConfigError, match="made from another spec") as caught:
        sealed.check_spec(saved, spec, source=str(path), allow_other=False)
    assert "--ignore-spec-mismatch" in caught.value.hint
    assert sealed.check_spec(saved, spec, source=str(path), allow_other=True) is saved.spec


def test_a_plan_file_without_a_seal_is_refused(tmp_path: Path, spec: Spec, world: Any) -> None:
    cluster, state = world
    path = tmp_path / "unsealed.plan"
    path.write_text(planfile.dumps(planned(spec, cluster, state)))
    with pytest.raises(ConfigError, match="carries no seal"):
        planfile.read(path)


def test_the_spec_must_be_the_one_the_plan_was_made_from_when_saving(
    tmp_path: Path, spec: Spec, world: Any
) -> None:
    cluster, state = world
    with pytest.raises(ConfigError, match="spec file changed while the plan was made"):
        planfile.write(
            tmp_path / "p.plan", planned(spec, cluster, state), spec_text=SPEC + "\n# edited\n  x: 1"
        )
    assert not (tmp_path / "p.plan").exists()
