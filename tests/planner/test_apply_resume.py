"""Resuming an interrupted apply without a cluster: which journal entries still stand (an entry a later undo
reversed cancels out, even when the undo was itself cut short) and which components are half-made (changed,
their workload missing), read through a fake cluster (providers.fake.FakeKubernetes). The undo itself runs
end to end in tests/e2e/test_apply_resume.py."""

from __future__ import annotations

from typing import Any, cast

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.apply.resume import half_made_components, outstanding
from gpuplan.planner.apply.steps import Step, step_of_entry
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.state.model import JournalAction, JournalEntry, JournalState

SA = "gfd/ServiceAccount/gpu-operator/nvidia-gpu-feature-discovery"
GFD = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
ORDER = ["driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator"]


def manifest(kind: str, name: str, image: str | None = None) -> dict[str, Any]:
    api_version = "apps/v1" if kind == "DaemonSet" else "v1"
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": {"gpuplan.io/stack": "lab"}},
    }
    if image is not None:
        body["spec"] = {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}
    return body


SA_BODY = manifest("ServiceAccount", "nvidia-gpu-feature-discovery")
GFD_BODY = manifest("DaemonSet", "gpu-feature-discovery", "gfd:v0.20.1")
PLUGIN_OLD = manifest("DaemonSet", "nvidia-device-plugin-daemonset", "plugin:v0.17.4")
PLUGIN_NEW = manifest("DaemonSet", "nvidia-device-plugin-daemonset", "plugin:v0.20.1")


def entry(
    address: str,
    action: JournalAction,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    state: JournalState = "done",
) -> JournalEntry:
    return JournalEntry(
        address=address,
        action=action,
        before=before,
        after=after,
        started_at="2026-11-29T18:00:00Z",
        state=state,
    )


def steps_of(journal: list[JournalEntry], cluster: FakeKubernetes) -> list[Step]:
    reader = cast(KubernetesWriter, cluster)  # step_of_entry only reads through the writer
    return [step_of_entry(e, reader) for e in journal]


def rollout(daemonset: str) -> HealthCheck:
    return HealthCheck(kind="rollout", params={"namespace": "gpu-operator", "daemonset": daemonset})


CHECKS = {
    "gfd": (rollout("gpu-feature-discovery"),),
    "devicePlugin": (rollout("nvidia-device-plugin-daemonset"),),
}


def test_entries_nobody_undid_stand_in_journal_order_and_pending_ones_are_left_out() -> None:
    journal = [
        entry(SA, "create", after=SA_BODY),
        entry(PLUGIN, "update", before=PLUGIN_OLD, after=PLUGIN_NEW),
        entry(GFD, "create", after=GFD_BODY, state="pending"),
    ]
    assert outstanding(journal) == journal[:2]


def test_a_create_and_the_delete_that_undid_it_cancel_out() -> None:
    create = entry(SA, "create", after=SA_BODY)
    undone = entry(SA, "delete", before=SA_BODY)
    kept = entry(PLUGIN, "update", before=PLUGIN_OLD, after=PLUGIN_NEW)
    assert outstanding([create, kept, undone]) == [kept]


def test_an_update_and_the_update_that_restored_it_cancel_out() -> None:
    update = entry(PLUGIN, "update", before=PLUGIN_OLD, after=PLUGIN_NEW)
    restored = entry(PLUGIN, "update", before=PLUGIN_NEW, after=PLUGIN_OLD)
    assert outstanding([update, restored]) == []


def test_a_later_change_at_the_same_address_that_does_not_reverse_the_first_stands_with_it() -> None:
    create = entry(SA, "create", after=SA_BODY)
    relabelled = {
        **SA_BODY,
        "metadata": {**SA_BODY["metadata"], "labels": {"gpuplan.io/stack": "lab", "x": "y"}},
    }
    update = entry(SA, "update", before=SA_BODY, after=relabelled)
    assert outstanding([create, update]) == [create, update]


def test_only_the_newest_entry_at_an_address_pairs_with_its_undo() -> None:
    """Re-created after an undo, then undone again: the pairs cancel from the inside out, nothing stands."""
    create, delete = entry(SA, "create", after=SA_BODY), entry(SA, "delete", before=SA_BODY)
    assert outstanding([create, delete, create, delete]) == []
    assert outstanding([create, delete, create]) == [create]


def test_a_component_whose_workload_is_missing_is_half_made_and_one_whose_workload_exists_is_not() -> None:
    cluster = FakeKubernetes([SA_BODY, PLUGIN_NEW])
    journal = [
        entry(SA, "create", after=SA_BODY),
        entry(PLUGIN, "update", before=PLUGIN_OLD, after=PLUGIN_NEW),
    ]
    steps = steps_of(journal, cluster)
    assert half_made_components(steps, CHECKS, cluster, ORDER) == ["gfd"]
    cluster.put(GFD_BODY)
    assert half_made_components(steps, CHECKS, cluster, ORDER) == []


def test_a_component_with_deletes_only_is_not_half_made() -> None:
    """Removing a component deletes its workload first; that is the plan's intent, not a half-made one."""
    cluster = FakeKubernetes([SA_BODY])
    steps = steps_of([entry(GFD, "delete", before=GFD_BODY)], cluster)
    assert half_made_components(steps, CHECKS, cluster, ORDER) == []


def test_resuming_never_undoes_the_runtimeclass_an_external_toolkit_relies_on() -> None:
    """An external toolkit has no workload of its own; gpuplan manages its ``nvidia`` RuntimeClass, which the
    device plugin's pods name. A resume once judged the toolkit as gpuplan runs it, found no toolkit
    DaemonSet, took it for half-made and deleted and recreated the RuntimeClass under running pods."""
    from lab_stack import full_lab_spec

    from gpuplan.planner.apply.model import NullHooks, Outcome
    from gpuplan.planner.apply.walker import resume_interrupted
    from gpuplan.planner.observe.adopt import record_applied
    from gpuplan.planner.spec.model import parse_spec
    from gpuplan.state.backend import MemoryBackend
    from gpuplan.state.model import StateFile

    from .conftest import make_node

    spec = parse_spec(full_lab_spec(), filename="gpustack.yaml")
    [runtime_class] = [o for o in spec.desired_objects() if o.manifest["kind"] == "RuntimeClass"]
    cluster = FakeKubernetes(nodes=[make_node("lab-node", gpu="rtx-3060", driver="580.105.08")])
    live = cluster.put(runtime_class.manifest)
    address = str(runtime_class.address)
    state = (
        StateFile.new()
        .with_records([record_applied(runtime_class, live, serial=1)])
        .model_copy(update={"journal": (entry(address, "create", after=dict(runtime_class.manifest)),)})
        .next_serial()
    )
    backend = MemoryBackend(state)
    result = resume_interrupted(spec=spec, backend=backend, writer=cluster, hooks=NullHooks())
    assert result is not None and result.outcome is Outcome.RESUMED, result.message
    assert result.half_made == [] and result.rolled_back == []
    again = cluster.read(live.key)
    assert again is not None and again.uid == live.uid, "the RuntimeClass was deleted and made again"
