"""The GPUStack status documents (design §7.3): after a walk and after a drift report (pure), and what a
remediation may apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab_stack import LAB_SPEC

from gpuplan.planner.apply import stack_status as walk_status
from gpuplan.planner.apply.model import ApplyResult, Failure, Operation, Outcome
from gpuplan.planner.drift import remediation
from gpuplan.planner.drift import stack_status as report_status
from gpuplan.planner.spec.model import Spec, load_spec


def _spec(tmp_path: Path) -> Spec:
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    return load_spec(path)


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_successful_apply_is_ready_and_leaves_drift_to_the_report(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    result = ApplyResult(changed=["x"], serial=3)
    status = walk_status.after_walk(result, spec.components(), {"devicePlugin": (1, 1)}, now="t", by="u@h")
    ready, drifted = _conditions(status)["Ready"], _conditions(status)["Drifted"]
    assert (ready["status"], ready["reason"]) == ("True", "Applied")
    assert "devicePlugin 1/1 nodes" in ready["message"] and "external: driver 580.105.08" in ready["message"]
    assert (drifted["status"], drifted["reason"]) == ("Unknown", "NotChecked")
    assert status["serial"] == 3 and status["lastApplied"] == {"time": "t", "by": "u@h", "operation": "apply"}
    assert status["components"]["toolkit"] == {"owner": "external"}


def test_a_component_short_of_its_nodes_is_not_ready_and_named(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    status = walk_status.after_walk(
        ApplyResult(serial=3), spec.components(), {"gfd": (0, 2)}, now="t", by="u@h"
    )
    assert _conditions(status)["Ready"]["message"] == "not ready: gfd: 0/2 nodes ready"


def test_a_failed_rollback_says_why_and_a_walk_with_nothing_to_do_keeps_the_drift_verdict(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    failed = ApplyResult(
        operation=Operation.ROLLBACK,
        outcome=Outcome.ROLLED_BACK,
        failed=[
            Failure("gfd/DaemonSet/ns/x", "CrashLoopBackOff", component="gfd", reason="CrashLoopBackOff")
        ],
    )
    ready = _conditions(walk_status.after_walk(failed, spec.components(), {}, now="t", by="u"))["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "RollbackFailed") and "CrashLoopBackOff" in ready[
        "message"
    ]
    quiet = walk_status.after_walk(
        ApplyResult(outcome=Outcome.NO_CHANGES, serial=2), spec.components(), {}, now="t", by="u"
    )
    assert set(_conditions(quiet)) == {"Ready"} and "lastApplied" not in quiet


def test_the_report_counts_findings_by_component_and_nodes_by_cell(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    cells = {"devicePlugin": {"status": "unhealthy"}, "gfd": {"status": "ok"}, "driver": {"status": "n/a"}}
    document = {
        "state_serial": 4,
        "checked_at": "t",
        "nodes": [{"components": cells}, {"components": {**cells, "devicePlugin": {"status": "ok"}}}],
        "findings": [
            {
                "kind": "changed",
                "component": "devicePlugin",
                "address": "devicePlugin/DaemonSet/ns/p",
                "detail": "image changed",
            },
            {"kind": "unhealthy", "component": "devicePlugin", "node": "n1", "detail": "not Ready"},
        ],
    }
    status = report_status.from_report(document, spec.components())
    conditions = _conditions(status)
    assert conditions["Ready"]["message"] == "not ready: devicePlugin: 1/2 nodes ready"
    assert conditions["Drifted"]["message"] == (
        "2 finding(s): devicePlugin: 1 changed, unhealthy on 1 node. "
        "First: devicePlugin/DaemonSet/ns/p: image changed"
    )
    assert (
        status["components"]["gfd"]["nodesReady"] == 2
        and "nodesDesired" not in status["components"]["driver"]
    )
    assert status["serial"] == 4 and status["lastChecked"] == "t" and "lastApplied" not in status
    clean = report_status.from_report({**document, "findings": []}, spec.components())
    assert _conditions(clean)["Drifted"] == {
        "type": "Drifted",
        "status": "False",
        "reason": "NoDrift",
        "message": "no drift found",
    }


PLAN_BASE: dict[str, Any] = {
    "gpuplan_version": "0",
    "created_at": "t",
    "stack": "lab",
    "namespace": "ns",
    "namespace_exists": True,
    "spec_file": "s",
    "spec_digest": "d",
    "state_lineage": None,
    "state_serial": 1,
    "resource_versions": {},
    "server_version": "v",
    "api_requests": 0,
    "nodes_total": 1,
    "gpu_nodes": 1,
}
"""The binding fields of a plan, for plans made of hand-written changes."""


def test_remediation_applies_only_the_reverse_of_drift() -> None:
    from gpuplan.planner.plan.model import Change, Plan, Reason

    def change(reason: Reason, *, disruptive: bool = False) -> Change:
        return Change(
            address="devicePlugin/DaemonSet/ns/p",
            component="devicePlugin",
            kind="DaemonSet",
            object="ns/p",
            action="update",
            reason=reason,
            reason_text="",
            disruptive=disruptive,
        )

    base = PLAN_BASE
    drift = Plan(**base, changes=(change(Reason.UPDATE_BECAUSE_DRIFT),))
    assert remediation.not_drift(drift, {}) == [] and remediation.disruptive(drift) == []
    edited = Plan(**base, changes=(change(Reason.UPDATE_BECAUSE_SPEC_CHANGED),))
    assert [c.reason for c in remediation.not_drift(edited, {})] == [Reason.UPDATE_BECAUSE_SPEC_CHANGED]
    restart = Plan(**base, changes=(change(Reason.UPDATE_BECAUSE_DRIFT, disruptive=True),))
    assert len(remediation.disruptive(restart)) == 1


def test_remediation_relabels_a_node_label_drift_back_to_what_the_state_recorded() -> None:
    from gpuplan.planner.plan.model import Change, NodeLabels, Plan, Reason

    relabel = Change(
        address="migManager/DaemonSet/ns/nvidia-mig-manager",
        component="migManager",
        kind="DaemonSet",
        object="ns/nvidia-mig-manager",
        action="update",
        reason=Reason.UPDATE_BECAUSE_NODE_LABELS,
        reason_text="",
    )
    base: dict[str, Any] = {**PLAN_BASE, "changes": (relabel,)}
    label = NodeLabels(
        pool="training", label="nvidia.com/mig.config", value="all-1g.10gb", before={"gpu-a": "all-disabled"}
    )
    plan = Plan(**base, node_labels=(label,))
    recorded = {"gpu-a": {"nvidia.com/mig.config": "all-1g.10gb"}}
    assert remediation.not_drift(plan, recorded) == [], "the label goes back to what gpuplan wrote"
    joined = Plan(**base, node_labels=(label.model_copy(update={"before": {"gpu-a": None}}),))
    assert remediation.not_drift(joined, {}) == [relabel], "a node gpuplan never labelled is a change"


def test_a_component_gpuplan_does_not_own_shows_the_version_its_nodes_run(tmp_path: Path) -> None:
    """The spec's version of an external component is a promise; the status says what runs: the nodes'
    host driver, and no toolkit version where the cluster reports none (only the runtime handler)."""
    path = tmp_path / "gpustack.yaml"
    toolkit = "toolkit: {owner: external, version: v1.20.1}"
    path.write_text(LAB_SPEC.replace("toolkit: {owner: external}", toolkit))
    spec = load_spec(path)
    running = {"driver": "570.195.03"}
    status = walk_status.after_walk(
        ApplyResult(changed=["x"], serial=3), spec.components(), {}, now="t", by="u", running=running
    )
    assert status["components"]["driver"] == {"owner": "external", "version": "570.195.03"}
    assert status["components"]["toolkit"] == {"owner": "external"}
    assert "external: driver 570.195.03, toolkit" in _conditions(status)["Ready"]["message"]
    node = {"name": "n", "gpu": {"present": True}, "driver": {"version": "570.195.03"}, "components": {}}
    cpu = {"name": "c", "gpu": {"present": False}, "driver": {"version": None}, "components": {}}
    reported = report_status.from_report({"nodes": [node, cpu], "findings": []}, spec.components())
    assert reported["components"]["driver"]["version"] == "570.195.03"
    assert reported["components"]["toolkit"] == {"owner": "external"}
