"""The apply journal without a cluster: the recorder's writes (serial + 1 each, entry pending then done,
records with the serial that wrote them, the kill seam) and the recovery of each kind of interrupted step
against a fake cluster (providers.fake.FakeKubernetes)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.planner.apply.journal import KILL_AT_ENV, Recorder, record_for, recover
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.model import JournalEntry, StateFile

ADDRESS = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
OLD_ADDRESS = "gfd/DaemonSet/kube-system/gpu-feature-discovery"


def daemonset(namespace: str = "gpu-operator", image: str = "gfd:v0.20.1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "gpu-feature-discovery",
            "namespace": namespace,
            "labels": {"gpuplan.io/stack": "lab"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "gfd", "image": image}]}}},
    }


def pending(
    action: str,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    address: str = ADDRESS,
) -> JournalEntry:
    return JournalEntry(
        address=address,
        action=action,
        before=before,
        after=after,  # type: ignore[arg-type]
        started_at="2026-11-29T18:00:00Z",
    )


def state_with(*entries: JournalEntry, records: tuple[tuple[str, dict[str, Any]], ...] = ()) -> StateFile:
    state = StateFile.new()
    for address, manifest in records:
        state = state.with_record(record_for(address, manifest, None, serial=1))
    for entry in entries:
        state = state.with_journal_entry(entry)
    return state.next_serial()


def test_the_recorder_writes_the_intent_then_the_record_each_with_serial_plus_one() -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend, StateFile.new())
    recorder.begin(ADDRESS, "create", before=None, after=daemonset())
    stored = backend.read()
    assert stored is not None and stored.serial == 1
    assert [(e.address, e.state) for e in stored.journal] == [(ADDRESS, "pending")] and not stored.resources
    recorder.finish(ADDRESS, records=[record_for(ADDRESS, daemonset(), None, serial=0)])
    stored = backend.read()
    assert stored is not None and stored.serial == 2
    assert stored.journal[0].state == "done" and stored.resources[ADDRESS].applied_serial == 2
    recorder.close(spec_digest="sha256:x")
    stored = backend.read()
    assert stored is not None and stored.serial == 3 and stored.journal == ()
    assert [g.serial for g in stored.history] == [3]


def test_the_kill_seam_fires_after_the_nth_write(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setenv(KILL_AT_ENV, "2")
    monkeypatch.setattr("gpuplan.planner.apply.journal.os.kill", lambda pid, sig: killed.append(sig))
    recorder = Recorder(MemoryBackend(), StateFile.new())
    recorder.begin(ADDRESS, "create", before=None, after=daemonset())
    assert killed == []
    recorder.finish(ADDRESS, records=[record_for(ADDRESS, daemonset(), None, serial=0)])
    assert len(killed) == 1


def test_a_create_that_landed_is_recorded_and_one_that_did_not_is_dropped() -> None:
    cluster = FakeKubernetes([daemonset()])
    state, notes = recover(state_with(pending("create", after=daemonset())), cluster)
    live = cluster.read(ObjectKey.of(daemonset()))
    assert live is not None and state.journal == () and state.resources[ADDRESS].uid == live.uid
    assert "done" in notes[0]

    state, notes = recover(state_with(pending("create", after=daemonset())), FakeKubernetes())
    assert state.journal == () and ADDRESS not in state.resources and "not done" in notes[0]


def test_an_update_is_recorded_only_when_the_live_object_carries_it() -> None:
    old, new = daemonset(image="gfd:v0.20.1"), daemonset(image="gfd:v0.20.2")
    entry = pending("update", before=old, after=new)
    state, _ = recover(state_with(entry, records=((ADDRESS, old),)), FakeKubernetes([old]))
    assert state.resources[ADDRESS].owned["spec"] == old["spec"]
    state, _ = recover(state_with(entry, records=((ADDRESS, old),)), FakeKubernetes([new]))
    assert state.resources[ADDRESS].owned["spec"] == new["spec"]


def test_a_delete_removes_the_record_only_when_the_object_is_gone() -> None:
    entry = pending("delete", before=daemonset())
    state, _ = recover(state_with(entry, records=((ADDRESS, daemonset()),)), FakeKubernetes())
    assert ADDRESS not in state.resources
    state, _ = recover(state_with(entry, records=((ADDRESS, daemonset()),)), FakeKubernetes([daemonset()]))
    assert ADDRESS in state.resources


def test_a_half_done_replace_of_an_adopted_object_drops_the_old_record() -> None:
    old = daemonset(namespace="kube-system")
    entry = pending("replace", before=old, after=daemonset())
    records = ((OLD_ADDRESS, old),)
    state, notes = recover(
        state_with(entry, records=records), FakeKubernetes()
    )  # old deleted, new not created
    assert OLD_ADDRESS not in state.resources and ADDRESS not in state.resources and "half done" in notes[0]
    state, _ = recover(state_with(entry, records=records), FakeKubernetes([daemonset()]))  # both steps landed
    assert set(state.resources) == {ADDRESS}
    state, _ = recover(state_with(entry, records=records), FakeKubernetes([old]))  # nothing happened yet
    assert set(state.resources) == {OLD_ADDRESS}


def node(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a100", "labels": labels}}


def test_a_node_label_write_is_journaled_before_and_recorded_after() -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend, StateFile.new())
    address = recorder.begin_labels(
        "migManager", "a100", {"nvidia.com/mig.config": None}, {"nvidia.com/mig.config": "all-1g.10gb"}
    )
    assert address == "migManager/Node/a100"
    written = backend.read()
    assert written is not None and [e.state for e in written.journal] == ["pending"]
    assert written.node_labels == {}
    recorder.labelled(address, "a100", {"nvidia.com/mig.config": "all-1g.10gb"})
    written = backend.read()
    assert written is not None and [e.state for e in written.journal] == ["done"]
    assert written.node_labels == {"a100": {"nvidia.com/mig.config": "all-1g.10gb"}}


def test_a_node_label_write_killed_before_its_record_is_recorded_when_it_landed() -> None:
    entry = pending(
        "update",
        address="migManager/Node/a100",
        before=node({"nvidia.com/mig.config": None}),
        after=node({"nvidia.com/mig.config": "all-1g.10gb"}),
    )
    landed = FakeKubernetes([node({"nvidia.com/mig.config": "all-1g.10gb"})])
    state, notes = recover(state_with(entry), landed)
    assert state.node_labels == {"a100": {"nvidia.com/mig.config": "all-1g.10gb"}}
    assert notes == ["labels nvidia.com/mig.config of node a100: written; recorded as gpuplan's"]
    assert [e.state for e in state.journal] == []  # the pending entry leaves; nothing else stood

    state, notes = recover(state_with(entry), FakeKubernetes([node({})]))
    assert state.node_labels == {} and "not written" in notes[0]


def test_a_label_removal_that_landed_drops_the_record() -> None:
    entry = pending(
        "update",
        address="devicePlugin/Node/a100",
        before=node({"nvidia.com/device-plugin.config": "inference"}),
        after=node({"nvidia.com/device-plugin.config": None}),
    )
    before = state_with(entry).model_copy(
        update={"node_labels": {"a100": {"nvidia.com/device-plugin.config": "inference"}}}
    )
    state, _ = recover(before, FakeKubernetes([node({})]))
    assert state.node_labels == {}
