"""make_plan against FakeKubernetes snapshots and in-memory states: actions, reasons, order, nodes, drift,
conflicts, external verification and findings (pure: no cluster, no files)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lab_stack import full_lab_spec
from pydantic import ValidationError

from gpuplan.errors import ConfigError
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import Plan, Reason, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import StateFile

LAB = full_lab_spec()
NOW = "2026-11-29T12:00:00Z"
UNWRAPPED = 10_000  # a width no line reaches: the tests that read one note per line read it whole
HAND_DEPLOYED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
        "template": {
            "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
            "spec": {
                "containers": [
                    {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}
                ]
            },
        },
    },
}


def spec_of(text: str = LAB, **replace: str) -> Spec:
    for old, new in replace.items():
        text = text.replace(old, new)
    return parse_spec(text, filename="gpustack.yaml")


def plan_for(spec: Spec, cluster: FakeKubernetes, state: StateFile | None = None, **options: Any) -> Plan:
    snapshot = refresh.refresh(cluster, spec, state)
    return make_plan(spec, state, snapshot, created_at=NOW, **options)


def applied(spec: Spec, cluster: FakeKubernetes) -> StateFile:
    """Every desired object created in the cluster and recorded, as apply will do it."""
    records = []
    for obj in spec.desired_objects():
        live = cluster.put(obj.manifest)
        records.append(adopt.record_applied(obj, live, serial=1))
    return StateFile.new().with_records(records).next_serial()


def by_address(plan: Plan) -> dict[str, Any]:
    return {change.address: change for change in plan.changes}


DS = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
DS_KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
IMAGE_PATH = "spec.template.spec.containers[name=nvidia-device-plugin].image"


def test_lab_first_plan_creates_every_object_and_reports_the_hand_deployed_plugin(gpu_node: Any) -> None:
    """The lab before any apply: all objects are created, the kube-system plugin is a conflict, driver
    unknown."""
    spec = spec_of()
    cluster = FakeKubernetes([HAND_DEPLOYED], nodes=[gpu_node("lab-node", gpu="rtx-3060", gfd=False)])
    plan = plan_for(spec, cluster)
    desired = [str(obj.address) for obj in spec.desired_objects()]
    assert [c.address for c in plan.changes] == desired
    assert {c.action for c in plan.changes} == {"create"}
    assert {c.reason for c in plan.changes} == {Reason.CREATE_BECAUSE_ABSENT}
    # the external toolkit's RuntimeClass nvidia, which gpuplan's operands need (modules/toolkit.py)
    assert {c.component for c in plan.changes} == {
        "toolkit",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
    }
    assert plan.summary.create == len(desired)
    assert by_address(plan)[DS].nodes == ("lab-node",)
    [conflict] = plan.conflicts
    assert (conflict.component, conflict.namespace, conflict.owner_kind) == (
        "devicePlugin",
        "kube-system",
        "manual",
    )
    commands = [r.command for r in conflict.resolutions]
    assert commands[0] == (
        f"gpuplan import -f gpustack.yaml {DS} DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    )
    assert commands[1] == "kubectl delete daemonset -n kube-system nvidia-device-plugin-daemonset"
    assert not plan.applicable and "kube-system/nvidia-device-plugin-daemonset" in plan.blockers[0]
    assert plan.components["driver"].status == "unknown"
    assert plan.components["driver"].detail == (
        "not reported yet: unknown until GFD runs (or a DCGM exporter) on 1 node (lab-node)"
    )
    assert plan.components["toolkit"].status == "verified"
    assert plan.has_changes


def test_import_turns_the_conflict_into_a_replacement(gpu_node: Any) -> None:
    """After `gpuplan import`, the adopted kube-system object is replaced by gpuplan's, no conflict
    remains."""
    spec = spec_of()
    cluster = FakeKubernetes(
        [HAND_DEPLOYED], nodes=[gpu_node("lab-node", gpu="rtx-3060", driver="580.105.08")]
    )
    live = cluster.read(ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset"))
    assert live is not None
    state = StateFile.new().with_record(adopt.record_imported("devicePlugin", live, serial=1)).next_serial()
    plan = plan_for(spec, cluster, state)
    change = by_address(plan)[DS]
    assert (change.action, change.reason) == ("replace", Reason.REPLACE_BECAUSE_IDENTITY_CHANGED)
    assert change.replaces == "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    assert change.before is not None and change.before["metadata"]["namespace"] == "kube-system"
    assert plan.conflicts == ()
    assert not [c for c in plan.changes if c.action == "delete"], (
        "the adopted record is replaced, not deleted"
    )
    assert plan.summary.replace == 1
    assert plan.components["driver"].status == "verified"
    assert plan.components["driver"].detail == "verified 580.105.08 on 1/1 nodes"


def test_an_applied_stack_is_all_no_op(gpu_node: Any) -> None:
    spec = spec_of()
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec, cluster)
    plan = plan_for(spec, cluster, state)
    assert {c.action for c in plan.changes} == {"no-op"}
    assert plan.drift == () and not plan.has_changes
    assert plan.state_serial == 1 and plan.state_lineage == state.lineage
    assert set(plan.resource_versions) == {
        key.ref
        for key in cluster.refresh(
            stack="lab", namespace="gpu-operator", kinds=refresh.manageable_kinds(spec, state)
        ).managed
    }


def test_a_spec_change_is_an_update_with_the_field_before_and_after(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    plan = plan_for(
        spec_of(**{"devicePlugin: {version: v0.20.1}": "devicePlugin: {version: v0.20.2}"}), cluster, state
    )
    change = by_address(plan)[DS]
    assert (change.action, change.reason) == ("update", Reason.UPDATE_BECAUSE_SPEC_CHANGED)
    [field] = [f for f in change.fields if f.path == IMAGE_PATH]
    assert (field.before, field.after) == (
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.2",
    )
    assert plan.summary.update >= 1 and change.nodes == ("lab-node",)


def test_drift_is_reported_with_its_manager_and_reverted(gpu_node: Any) -> None:
    """Someone ran `kubectl set image` on the managed DaemonSet: drift names the field and the manager."""
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    live = cluster.read(DS_KEY)
    assert live is not None
    edited = copy.deepcopy(dict(live.manifest))
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/plugin:hacked"
    edited["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-set",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-11-29T11:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {"f:containers": {'k:{"name":"nvidia-device-plugin"}': {"f:image": {}}}}
                    }
                }
            },
        }
    ]
    cluster.put(edited)
    plan = plan_for(spec_of(), cluster, state)
    [drift] = plan.drift
    assert (drift.address, drift.status) == (DS, "changed")
    [field] = drift.fields
    assert (field.path, field.after, field.managers) == (
        IMAGE_PATH,
        "example.com/plugin:hacked",
        ("kubectl-set",),
    )
    change = by_address(plan)[DS]
    assert (change.action, change.reason) == ("update", Reason.UPDATE_BECAUSE_DRIFT)
    assert "kubectl-set" in change.reason_text
    assert plan.has_changes


def test_refresh_only_takes_no_actions_but_reports_drift(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    assert not plan_for(spec_of(), cluster, state, refresh_only=True).has_changes
    cluster.remove(DS_KEY)
    plan = plan_for(spec_of(), cluster, state, refresh_only=True)
    assert plan.changes == () and plan.refresh_only
    assert [(d.address, d.status) for d in plan.drift] == [(DS, "deleted")]
    assert plan.has_changes, "drift alone makes a refresh-only plan exit 2"


def test_an_object_deleted_outside_is_created_again(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    cluster.remove(DS_KEY)
    change = by_address(plan_for(spec_of(), cluster, state))[DS]
    assert (change.action, change.reason) == ("create", Reason.CREATE_BECAUSE_DELETED_OUTSIDE)


def test_an_immutable_field_change_is_a_replacement(gpu_node: Any) -> None:
    """The recorded (and live) selector differs from the one now rendered: a DaemonSet selector is
    immutable."""
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    live = cluster.read(DS_KEY)
    assert live is not None
    old = copy.deepcopy(dict(live.manifest))
    old["spec"]["selector"] = {"matchLabels": {"app": "old-plugin"}}
    cluster.put(old)
    record = state.record(DS)
    owned = copy.deepcopy(record.owned)
    owned["spec"]["selector"] = {"matchLabels": {"app": "old-plugin"}}
    state = state.with_record(record.model_copy(update={"owned": owned})).next_serial()
    change = by_address(plan_for(spec_of(), cluster, state))[DS]
    assert (change.action, change.reason) == ("replace", Reason.REPLACE_BECAUSE_IMMUTABLE_FIELD)
    assert change.replace_paths == ("spec.selector.matchLabels.app",)
    # rollback could only bring the old selector back as a new DaemonSet: a new uid, its pods restart
    assert change.undo == (
        "cannot be undone in place: if the apply fails, rollback recreates the old object from "
        "its recorded manifest, a new object (new uid): its pods restart"
    )


def test_a_tainted_record_is_replaced(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster).tainted(DS).next_serial()
    change = by_address(plan_for(spec_of(), cluster, state))[DS]
    assert (change.action, change.reason) == ("replace", Reason.REPLACE_BECAUSE_TAINTED)
    assert change.undo.startswith(
        "cannot be undone in place: if the apply fails, rollback recreates the old object"
    ) and change.undo.endswith("its pods restart")
    # the untainted objects are left alone and carry no note
    assert [c.address for c in plan_for(spec_of(), cluster, state).changes if c.undo] == [DS]


def test_owner_none_deletes_in_reverse_graph_order(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    spec = spec_of(
        **{
            "gfd: {version: v0.20.1}": "gfd: {owner: none}",
            "dcgmExporter: {version: 4.6.0-4.8.3-distroless}": "dcgmExporter: {owner: none}",
        }
    )
    plan = plan_for(spec, cluster, state)
    deletes = [c for c in plan.changes if c.action == "delete"]
    assert {c.reason for c in deletes} == {Reason.DELETE_BECAUSE_OWNER_NONE}
    assert [c.component for c in deletes] == sorted(
        (c.component for c in deletes), key=["dcgmExporter", "gfd"].index
    )
    assert plan.changes[-len(deletes) :] == tuple(deletes), "deletions come after every other change"
    assert plan.components["gfd"].status == "to-delete"


def test_destroy_deletes_every_object_dependents_first(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    plan = plan_for(spec_of(), cluster, state, destroy=True)
    assert {c.action for c in plan.changes} == {"delete"} and len(plan.changes) == len(state.resources)
    order = list(dict.fromkeys(c.component for c in plan.changes))
    assert order == ["validator", "dcgmExporter", "gfd", "devicePlugin", "toolkit"]
    assert plan.findings == () and plan.conflicts == ()


def test_a_labelled_object_missing_from_the_state_is_adopted(gpu_node: Any) -> None:
    """A crashed apply created the DaemonSet but never recorded it: the plan adopts it, nothing is
    recreated."""
    spec = spec_of()
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec, cluster).without(DS).next_serial()
    change = by_address(plan_for(spec, cluster, state))[DS]
    assert (change.action, change.reason, change.fields) == ("adopt", Reason.ADOPT_BECAUSE_UNRECORDED, ())


def test_target_plans_the_component_and_its_dependencies_only(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    plan = plan_for(spec_of(), cluster, targets=["gfd"])
    assert {c.component for c in plan.changes} == {"gfd", "devicePlugin", "toolkit"}  # toolkit: RuntimeClass
    assert not plan.complete and plan.targets == ("gfd",)
    assert plan.components["validator"].status == "not-targeted"
    with pytest.raises(ConfigError, match="unknown component 'gdf'"):
        plan_for(spec_of(), cluster, targets=["gdf"])


def test_driver_changes_are_disruptive_and_name_their_nodes(gpu_node: Any) -> None:
    spec = spec_of(**{'driver: {owner: external, version: "580.105.08"}': 'driver: {version: "580.105.08"}'})
    nodes = [gpu_node(f"gpu-{i}", gpu="a100-80gb", gfd=False) for i in range(3)]
    cluster = FakeKubernetes(nodes=[*nodes, gpu_node("cpu-0", gpu=None)])
    state = applied(spec, cluster)
    newer = spec_of(**{'driver: {owner: external, version: "580.105.08"}': 'driver: {version: "580.126.09"}'})
    change = by_address(plan_for(newer, cluster, state))[
        "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"
    ]
    assert change.action == "update" and change.disruptive
    assert change.nodes == ("gpu-0", "gpu-1", "gpu-2")
    assert "all GPU pods on 3 nodes" in change.disruption


def test_gpuplan_driver_on_nodes_with_a_host_driver_is_an_error(gpu_node: Any) -> None:
    spec = spec_of(**{'driver: {owner: external, version: "580.105.08"}': 'driver: {version: "580.105.08"}'})
    cluster = FakeKubernetes(
        nodes=[gpu_node("a100-node", driver="570.195.03"), gpu_node("h100-node", gpu="h100-80gb")]
    )
    plan = plan_for(spec, cluster)
    errors = [f for f in plan.findings if f.severity == "error"]
    assert [(f.component, f.node) for f in errors] == [("driver", "a100-node")]
    assert not plan.applicable and any("a100-node" in b for b in plan.blockers)


def test_external_driver_mismatch_and_unknown_nodes(gpu_node: Any) -> None:
    nodes = [
        gpu_node("ok", driver="580.105.08"),
        gpu_node("old", driver="575.57.08"),
        gpu_node("new", gfd=False),
    ]
    plan = plan_for(spec_of(), FakeKubernetes(nodes=nodes))
    status = plan.components["driver"]
    assert status.status == "mismatch"
    assert status.detail == (
        "verified 580.105.08 on 1/3 nodes; mismatch on node old: reports 575.57.08, spec says "
        "580.105.08; not reported yet: unknown until GFD runs (or a DCGM exporter) on 1 node "
        "(new)"
    )
    assert status.problem_nodes == ("old", "new")


def test_external_toolkit_needs_the_runtime_handler(gpu_node: Any) -> None:
    nodes = [gpu_node("a", handlers=("runc", "nvidia")), gpu_node("b", handlers=("runc",))]
    plan = plan_for(spec_of(), FakeKubernetes(nodes=nodes))
    assert plan.components["toolkit"].status == "partial"
    assert plan.components["toolkit"].problem_nodes == ("b",)
    # gpuplan creates the RuntimeClass its operands name (the host toolkit provides the handler)
    assert [c.action for c in plan.changes if c.address == "toolkit/RuntimeClass/nvidia"] == ["create"]
    assert not any("RuntimeClass nvidia does not exist" in f.message for f in plan.findings)


def test_a_gpu_operator_cluster_policy_is_a_conflict_with_its_own_resolutions(gpu_node: Any) -> None:
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"enabled": False}, "devicePlugin": {"enabled": True}},
    }
    helm = copy.deepcopy(HAND_DEPLOYED)
    helm["metadata"].update(
        {
            "name": "nvdp",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "nvdp"},
        }
    )
    plan = plan_for(spec_of(), FakeKubernetes([policy, helm], nodes=[gpu_node()]))
    by_owner = {c.owner_kind: c for c in plan.conflicts if c.component == "devicePlugin"}
    assert by_owner["gpu-operator"].resolutions[0].command == (
        "kubectl patch clusterpolicy cluster-policy --type merge -p "
        '\'{"spec":{"devicePlugin":{"enabled":false}}}\''
    )
    assert by_owner["helm"].resolutions[0].command == "helm uninstall nvdp -n kube-system"
    assert {c.component for c in plan.conflicts} == {"devicePlugin", "gfd", "dcgmExporter", "validator"}


def test_plan_value_is_frozen_and_its_document_has_the_contract_keys(gpu_node: Any) -> None:
    plan = plan_for(spec_of(), FakeKubernetes([HAND_DEPLOYED], nodes=[gpu_node()]))
    document = plan.document()
    assert {"format_version", "changes", "drift", "conflicts", "summary"} <= set(document)
    assert {"address", "component", "action", "reason", "before", "after"} <= set(document["changes"][0])
    assert set(document["summary"]) == {"create", "update", "replace", "delete", "no-op", "adopt"}
    with pytest.raises(ValidationError):
        plan.changes = ()


def test_an_external_device_plugin_is_verified_by_allocatable_gpus(gpu_node: Any) -> None:
    spec = spec_of(**{"devicePlugin: {version: v0.20.1}": "devicePlugin: {owner: external}"})
    nodes = [gpu_node("a", allocatable="8"), gpu_node("b")]
    plan = plan_for(spec, FakeKubernetes([HAND_DEPLOYED], nodes=nodes))
    status = plan.components["devicePlugin"]
    assert (status.status, status.problem_nodes) == ("partial", ("b",))
    assert status.detail == (
        "nvidia.com/gpu allocatable on 1/2 nodes (missing on b); run by nobody: it was "
        "deployed by hand as DaemonSet kube-system/nvidia-device-plugin-daemonset"
    )
    assert plan.conflicts == (), "an external component may be run by another owner"


def test_a_foreign_object_with_gpuplans_name_is_a_conflict_not_a_silent_create(gpu_node: Any) -> None:
    squatter = copy.deepcopy(HAND_DEPLOYED)
    squatter["metadata"]["namespace"] = "gpu-operator"
    plan = plan_for(spec_of(), FakeKubernetes([squatter], nodes=[gpu_node()]))
    change = by_address(plan)[DS]
    assert (change.action, change.reason) == ("create", Reason.CREATE_OVER_FOREIGN_OBJECT)
    [conflict] = plan.conflicts
    assert conflict.resolutions[0].command == (
        f"gpuplan import -f gpustack.yaml {DS} DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
    )


def test_labelled_leftovers_of_a_component_now_none_are_deleted(gpu_node: Any) -> None:
    """A crashed apply left gfd objects that the state never recorded; gfd is now owner none."""
    cluster = FakeKubernetes(nodes=[gpu_node()])
    for obj in spec_of().desired_objects():
        if obj.address.component == "gfd":
            cluster.put(obj.manifest)
    plan = plan_for(spec_of(**{"gfd: {version: v0.20.1}": "gfd: {owner: none}"}), cluster)
    deletes = [c for c in plan.changes if c.action == "delete"]
    assert {c.component for c in deletes} == {"gfd"} and len(deletes) == 6
    assert deletes[0].kind == "DaemonSet", "the workload goes first"
    assert all(
        c.reason == Reason.DELETE_BECAUSE_OWNER_NONE and "not in the state" in c.reason_text for c in deletes
    )


RUNTIME_CLASS: dict[str, Any] = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}


def test_an_external_toolkits_runtime_class_status_follows_gpuplans_own_object(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    spec = spec_of()
    first = plan_for(spec, cluster)
    assert "RuntimeClass nvidia is created by this plan" in first.components["toolkit"].detail
    state = applied(spec, cluster)
    again = plan_for(spec, cluster, state)
    detail = again.components["toolkit"].detail
    assert "RuntimeClass nvidia exists (managed by gpuplan)" in detail and "missing" not in detail


def test_a_hand_made_runtime_class_with_an_external_toolkit_offers_runtime_class_create_false(
    gpu_node: Any,
) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    cluster.put(RUNTIME_CLASS)
    [conflict] = [c for c in plan_for(spec_of(), cluster).conflicts if c.kind == "RuntimeClass"]
    summaries = [r.summary for r in conflict.resolutions]
    assert any("spec.toolkit.runtimeClass.create: false" in text for text in summaries)
    assert not any("owner: external" in text for text in summaries)  # it already is
    [gpuplan_owned] = [
        c
        for c in plan_for(spec_of(**{"toolkit: {owner: external}": "toolkit: {}"}), cluster).conflicts
        if c.kind == "RuntimeClass"
    ]
    assert any("spec.toolkit.owner: external" in r.summary for r in gpuplan_owned.resolutions)


def test_a_change_that_cannot_be_undone_in_place_says_so_in_the_plan_document_and_view(gpu_node: Any) -> None:
    from gpuplan.views import plan_human, progress

    cluster = FakeKubernetes(
        [HAND_DEPLOYED], nodes=[gpu_node("lab-node", gpu="rtx-3060", driver="580.105.08")]
    )
    live = cluster.read(ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset"))
    assert live is not None
    state = StateFile.new().with_record(adopt.record_imported("devicePlugin", live, serial=1)).next_serial()
    plan = plan_for(spec_of(), cluster, state)
    document = plan.document()
    undo = {c["address"]: c["undo"] for c in document["changes"] if c["undo"]}
    assert list(undo) == [DS]
    assert undo[DS].startswith(
        "deletes apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset, which "
        "gpuplan did not create: it cannot be undone in place"
    )
    assert f"      ! {undo[DS]}" in plan_human.render(document, width=UNWRAPPED)
    assert progress.undo_notes(document) == [f"{DS}: {undo[DS]}"]
    own = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    mine = applied(spec_of(), own)
    deletes = {
        c.kind: c
        for c in plan_for(spec_of(**{"gfd: {version: v0.20.1}": "gfd: {owner: none}"}), own, mine).changes
        if c.action == "delete"
    }
    # gpuplan's own objects: rollback recreates them too, as new objects; the note says what that costs per
    # kind
    assert set(deletes) == {
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    assert all(
        c.undo.startswith(
            "cannot be undone in place: if the apply fails, rollback recreates it from its "
            "recorded manifest, a new object (new uid): "
        )
        for c in deletes.values()
    )
    assert "which gpuplan did not create" not in " ".join(c.undo for c in deletes.values())
    assert deletes["DaemonSet"].undo.endswith(": its pods restart")
    assert deletes["ServiceAccount"].undo.endswith(": tokens issued for the old one are refused")
    assert deletes["ClusterRole"].undo.endswith(
        ": harmless for a ClusterRole, which is referred to by name only"
    )


def test_gpuplans_own_object_moved_to_a_new_namespace_is_not_called_foreign_in_its_undo_note(
    gpu_node: Any,
) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    state = applied(spec_of(), cluster)
    moved = by_address(plan_for(spec_of(**{"spec:\n": "spec:\n  namespace: gpu-ops\n"}), cluster, state))
    change = moved["devicePlugin/DaemonSet/gpu-ops/nvidia-device-plugin-daemonset"]
    assert (change.action, change.replaces) == ("replace", DS_KEY.ref)
    assert change.undo == (
        "cannot be undone in place: if the apply fails, rollback recreates the old object from "
        "its recorded manifest, a new object (new uid): its pods restart"
    )


def test_a_destroy_plan_notes_every_delete_but_its_pre_confirm_notes_stay_a_few_lines(gpu_node: Any) -> None:
    from gpuplan.views import plan_human, progress

    cluster = FakeKubernetes(nodes=[gpu_node("lab-node", gpu="rtx-3060")])
    plan = plan_for(spec_of(), cluster, applied(spec_of(), cluster), destroy=True)
    document = plan.document()
    deletes = [c for c in document["changes"] if c["action"] == "delete"]
    assert len(deletes) > progress.OWN_UNDO_NOTES_SHOWN and all(c["undo"] for c in deletes)
    text = plan_human.render(document, width=UNWRAPPED)
    assert all(f"      ! {c['undo']}" in text for c in deletes)  # one line under each change
    assert f"{len(deletes)} changes cannot be undone in place" in text.splitlines()[-1]
    service = next(c for c in deletes if c["kind"] == "Service")
    assert service["undo"].endswith(": it gets a new cluster IP")
    [note] = progress.undo_notes(document)  # nothing disruptive, nothing foreign: the deletes are one line
    daemonsets = sum(1 for c in deletes if c["kind"] == "DaemonSet")
    assert note.startswith(
        f"{len(deletes)} deletes or replaces of gpuplan's objects cannot be undone in place"
    )
    assert f"the pods of {daemonsets} DaemonSets restart" in note
    assert note.endswith(
        f"and {len(deletes) - progress.OWN_UNDO_NOTES_SHOWN} more (`gpuplan show PLANFILE` gives each note)"
    )


def test_import_is_not_offered_for_an_address_gpuplan_already_manages(gpu_node: Any) -> None:
    """Once gpuplan's own device plugin is applied, `gpuplan import` of the hand-deployed one into the same
    address would fail (already in the state): the conflict offers the other ways out only."""
    spec = spec_of()
    cluster = FakeKubernetes([], nodes=[gpu_node("lab-node", gpu="rtx-3060", driver="580.105.08")])
    state = applied(spec, cluster)
    cluster.put(HAND_DEPLOYED)
    [conflict] = plan_for(spec, cluster, state).conflicts
    commands = [r.command for r in conflict.resolutions]
    assert not [command for command in commands if command.startswith("gpuplan import")], commands
    assert commands[0] == "kubectl delete daemonset -n kube-system nvidia-device-plugin-daemonset"
