"""Crash safety for apply: a write-ahead journal in the state, and the recovery of an interrupted apply.

:class:`Recorder` is the only writer of the state during an apply. Before each mutation of the cluster it
writes a :class:`~gpuplan.state.model.JournalEntry` (address, action, before, after, started_at, pending) with
serial + 1; after it, the record (:func:`gpuplan.planner.observe.adopt.record_applied`) and the entry marked
done, serial + 1 again. Every write goes through the backend's atomic replace, so a ``kill -9`` at any moment
leaves either state, and every object apply may have created is named in the state or in a pending entry
(Pulumi's ``pending_operations``; Terraform loses in-flight objects).

:func:`recover` is what the next apply runs first, under the same lock: for each pending entry it reads the
object and records what really happened. A create or update that landed is recorded; one that did not is
dropped; a delete that landed removes the record; a replace that deleted the old object but had not created
the new one drops the old record (the converge that follows creates the new one, which finishes the replace).
It never writes to the cluster, so it cannot make things worse; the plan made after it converges. The done
entries stay in the journal: they name what the interrupted apply changed without its health gates having
passed, which :func:`gpuplan.planner.apply.walker.resume_interrupted` verifies (or rolls back) next.

Node label writes (:mod:`gpuplan.planner.apply.node_labels`) are journaled the same way, at the address
``<component>/Node/<node>`` with the labels before and after: :func:`recover` records a write that landed as
gpuplan's (the state's ``node_labels``) and leaves the record as it was for one that did not.

Test-only seam: ``GPUPLAN_TEST_KILL_AT=<n>`` makes the process SIGKILL itself right after the n-th state write
of the recorder (journal entries and records alike), so tests can crash an apply at each journal step.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplan.modules.base import Address, DesiredObject
from gpuplan.planner.observe import adopt
from gpuplan.providers.protocols import ObjectReader, contains
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.state.backend import StateBackend
from gpuplan.state.model import JournalAction, JournalEntry, ResourceRecord, StateFile, now_rfc3339

KILL_AT_ENV = "GPUPLAN_TEST_KILL_AT"


def key_of(manifest: Mapping[str, Any]) -> ObjectKey:
    return ObjectKey.of(manifest)


def record_for(
    address: str, manifest: Mapping[str, Any], live: LiveObject | None, *, serial: int
) -> ResourceRecord:
    """The record of ``manifest`` applied at ``address`` with the identity the server gave it."""
    return adopt.record_applied(DesiredObject(Address.parse(address), manifest), live, serial=serial)


def refreshed(record: ResourceRecord, live: LiveObject | None, *, serial: int) -> ResourceRecord:
    """``record`` with the identity of ``live`` (an object rollback recreated has a new uid)."""
    if live is None:
        return record
    return record.model_copy(
        update={
            "uid": live.uid,
            "resource_version": live.resource_version,
            "generation": live.generation,
            "applied_serial": serial,
        }
    )


class Recorder:
    """Writes the state during an apply: journal entries before mutations, records after. Thread-safe."""

    def __init__(self, backend: StateBackend, state: StateFile) -> None:
        self.backend = backend
        self.state = state
        self._mutex = threading.Lock()
        self._writes = 0
        kill_at = os.environ.get(KILL_AT_ENV, "").strip()
        self._kill_at = int(kill_at) if kill_at.isdigit() else None

    @property
    def serial(self) -> int:
        serial: int = self.state.serial
        return serial

    def begin(
        self,
        address: str,
        action: JournalAction,
        *,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> None:
        """The intent, written before the mutation."""
        entry = JournalEntry(
            address=address,
            action=action,
            before=dict(before) if before else None,
            after=dict(after) if after else None,
            started_at=now_rfc3339(),
        )
        with self._mutex:
            self._write(self.state.with_journal_entry(entry))

    def finish(
        self,
        address: str,
        *,
        records: Iterable[ResourceRecord] = (),
        remove: Iterable[str] = (),
        taint: Iterable[str] = (),
    ) -> None:
        """The mutation landed: records set or removed, the entry marked done, in one write.

        Records are given without a serial; they get the serial of this write."""
        with self._mutex:
            serial = self.state.serial + 1
            state = self.state.journal_done(address)
            self._write(self._updated(state, records, remove, taint, serial))

    def update(
        self, *, records: Iterable[ResourceRecord] = (), remove: Iterable[str] = (), taint: Iterable[str] = ()
    ) -> None:
        """Records changed without a mutation (taints after a failure)."""
        with self._mutex:
            self._write(self._updated(self.state, records, remove, taint, self.state.serial + 1))

    def begin_labels(
        self, component: str, node: str, before: Mapping[str, str | None], after: Mapping[str, str | None]
    ) -> str:
        """The intent to set ``node``'s labels from ``before`` to ``after`` (None: absent), written before
        the write; its journal address, which :meth:`labelled` marks done."""
        address = label_address(component, node)
        self.begin(
            address, "update", before=node_labels_doc(node, before), after=node_labels_doc(node, after)
        )
        return address

    def labelled(self, address: str, node: str, labels: Mapping[str, str | None]) -> None:
        """Node labels written: the state's record of the labels gpuplan owns on ``node`` (None: it owns the
        label no more) and the intent at ``address`` marked done, in one write."""
        with self._mutex:
            self._write(with_node_labels(self.state.journal_done(address), node, labels))

    def remember(self, handover: dict[str, Any] | None) -> None:
        """What a GPU Operator takeover took, for its rollback (:mod:`gpuplan.planner.apply.takeover`);
        written before the takeover's first mutation, None once given back."""
        with self._mutex:
            self._write(self.state.with_operator_handover(handover))

    def close(
        self,
        *,
        spec_digest: str | None,
        changes: Mapping[str, int] | None = None,
        outcome: str = "applied",
        host_drivers: Mapping[str, str] | None = None,
        node_pools: Sequence[Mapping[str, Any]] = (),
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        """The apply ended: clear the journal; on success (``spec_digest``) keep the applied generation, with
        the count of its changes by action, its outcome (``gpuplan state history``) and the spec it was
        applied with, and ``host_drivers`` when given (the versions an external driver without a pinned
        version runs at)."""
        with self._mutex:
            state = self.state.without_journal().next_serial()
            if spec_digest is not None:
                state = state.with_generation(
                    spec_digest, changes=changes, outcome=outcome, node_pools=node_pools, spec=spec
                )
            if host_drivers is not None:
                state = state.with_host_drivers(host_drivers)
            self._store(state)

    @staticmethod
    def _updated(
        state: StateFile,
        records: Iterable[ResourceRecord],
        remove: Iterable[str],
        taint: Iterable[str],
        serial: int,
    ) -> StateFile:
        state = state.with_records(r.model_copy(update={"applied_serial": serial}) for r in records)
        gone = [address for address in remove if address in state.resources]
        if gone:
            state = state.without(*gone)
        for address in taint:
            if address in state.resources:
                state = state.tainted(address)
        return state

    def _write(self, state: StateFile) -> None:
        self._store(state.next_serial())

    def _store(self, state: StateFile) -> None:
        self.backend.write(state)
        self.state = state
        self._writes += 1
        if self._kill_at is not None and self._writes == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # test-only: crash right after the n-th journal step


def label_address(component: str, node: str) -> str:
    """The journal address of a node label write: the component that reads the labels, and the Node."""
    return str(Address(component, "Node", None, node))


def node_labels_doc(node: str, labels: Mapping[str, str | None]) -> dict[str, Any]:
    """A journal entry's side of a node label write: the Node with the labels it is about (None: absent)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": dict(labels)}}


def is_label_entry(entry: JournalEntry) -> bool:
    return (entry.after or entry.before or {}).get("kind") == "Node"


def with_node_labels(state: StateFile, node: str, labels: Mapping[str, str | None]) -> StateFile:
    """``state`` recording ``labels`` as gpuplan's on ``node`` (None: not gpuplan's any more)."""
    owned = {**state.node_labels.get(node, {}), **labels}
    kept = {label: value for label, value in owned.items() if value is not None}
    node_labels = {**state.node_labels, node: kept}
    if not kept:
        del node_labels[node]
    return state.model_copy(update={"node_labels": dict(sorted(node_labels.items()))})


def recover(state: StateFile, reader: ObjectReader) -> tuple[StateFile, list[str]]:
    """The state with every pending journal entry reconciled against the cluster, and a line per entry
    saying what was found. The pending entries leave the journal, the done ones stay (an interrupted apply's
    unverified changes, see :func:`gpuplan.planner.apply.walker.resume_interrupted`); the caller writes the
    result
    (serial + 1)."""
    notes: list[str] = []
    for entry in state.pending_journal():
        state, note = _reconcile(state, entry, reader)
        notes.append(note)
    done = tuple(entry for entry in state.journal if entry.state != "pending")
    return state.model_copy(update={"journal": done}), notes


def _reconcile(state: StateFile, entry: JournalEntry, reader: ObjectReader) -> tuple[StateFile, str]:
    if is_label_entry(entry):
        return _reconcile_labels(state, entry, reader)
    serial = state.serial + 1
    what = f"{entry.action} of {entry.address}"
    if entry.action == "delete":
        live = reader.read(key_of(entry.before)) if entry.before else None
        if live is None:
            return _without(state, entry.address), f"{what}: done (the object is gone); its record is removed"
        return state, f"{what}: not done (the object still exists); its record is kept"
    if entry.after is None:
        return state, f"{what}: nothing to reconcile"
    live = reader.read(key_of(entry.after))
    landed = live is not None and contains(live.manifest, entry.after)
    if entry.action == "replace":
        return _reconcile_replace(state, entry, reader, live if landed else None, serial)
    if landed:
        return (
            state.with_record(record_for(entry.address, entry.after, live, serial=serial)),
            f"{what}: done; the object is recorded as applied",
        )
    return state, f"{what}: not done; the state is unchanged"


def _reconcile_labels(state: StateFile, entry: JournalEntry, reader: ObjectReader) -> tuple[StateFile, str]:
    """A node label write that landed is recorded as gpuplan's (a removal: no longer); one that did not
    leaves the record as it was, and the plan that follows writes it again."""
    assert entry.after is not None
    node = str(entry.after["metadata"]["name"])
    wanted: Mapping[str, str | None] = entry.after["metadata"]["labels"]
    live = reader.read(ObjectKey("v1", "Node", None, node))
    what = f"labels {', '.join(sorted(wanted))} of node {node}"
    if live is None:
        return state, f"{what}: the node is gone; nothing to record"
    if all(live.labels.get(label) == value for label, value in wanted.items()):
        return with_node_labels(state, node, wanted), f"{what}: written; recorded as gpuplan's"
    return state, f"{what}: not written; the state is unchanged"


def _reconcile_replace(
    state: StateFile, entry: JournalEntry, reader: ObjectReader, new: LiveObject | None, serial: int
) -> tuple[StateFile, str]:
    assert entry.after is not None
    what = f"replace of {entry.address}"
    old_key = key_of(entry.before) if entry.before else key_of(entry.after)
    old_addresses = [
        r.address
        for r in state.resources.values()
        if (r.api_version, r.kind, r.namespace, r.name)
        == (old_key.api_version, old_key.kind, old_key.namespace, old_key.name)
        and r.address != entry.address
    ]
    if new is not None:
        state = _without(state, *old_addresses)
        return (
            state.with_record(record_for(entry.address, entry.after, new, serial=serial)),
            f"{what}: done; the new object is recorded",
        )
    old_gone = old_key != key_of(entry.after) and reader.read(old_key) is None
    if old_gone:
        return (
            _without(state, *old_addresses),
            f"{what}: half done (the old object is deleted, the new one not created); the old record is "
            "removed and this apply creates the new object",
        )
    return state, f"{what}: not done or half done; the next plan finishes it"


def _without(state: StateFile, *addresses: str) -> StateFile:
    present = [address for address in addresses if address in state.resources]
    return state.without(*present) if present else state
