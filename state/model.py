"""The state file's model (format 2): what gpuplan manages, as it applied it, and what it applied before.

Callers: the backends (:mod:`gpuplan.state.local`, :mod:`gpuplan.state.backend`) read and write it; the
planner reads records to diff intent (desired vs state) and drift (state vs live); the apply engine records
each object it wrote, keeps a write-ahead journal and a short history for ``gpuplan rollback``.

Every value is frozen; updates return a new :class:`StateFile` (``with_record``, ``without``,
``next_serial``, ...). The serial is never bumped implicitly: whoever writes calls ``next_serial()``, and the
backend refuses a changed state whose serial is not above the stored one (Terraform's rule, design §3.2).
:func:`to_json` is the one serialisation: sorted keys and addresses, so equal states give equal bytes.
"""

from __future__ import annotations

import difflib
import getpass
import json
import os
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import gpuplan
from gpuplan.errors import StateError
from gpuplan.state import credentials

FORMAT_VERSION = 2
HISTORY_LIMIT = 100
"""Applied generations kept in the state (Helm's ``--history-max`` keeps 10 revisions by default)."""

RecordStatus = Literal["ready", "tainted"]
JournalAction = Literal["create", "update", "replace", "delete", "adopt"]
JournalState = Literal["pending", "done"]


def gpuplan_version() -> str:
    """The running gpuplan's version (the package's constant)."""
    return gpuplan.__version__


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def make_address(component: str, kind: str, namespace: str | None, name: str) -> str:
    """Design §3.3: ``<component>/<Kind>/<namespace>/<name>``, namespace left out for cluster-scoped kinds."""
    parts = [component, kind, *([namespace] if namespace else []), name]
    return "/".join(parts)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class ResourceRecord(_Frozen):
    """One managed object as gpuplan last applied it."""

    address: str
    component: str
    api_version: str
    kind: str
    namespace: str | None = None
    name: str
    owned: dict[str, Any] = Field(
        description="The owned fields as applied: the desired manifest gpuplan "
        "wrote, normalised; Secret data only as digests."
    )
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    status: RecordStatus = "ready"
    applied_serial: int = Field(ge=0, description="The state serial that last wrote this record.")

    @model_validator(mode="after")
    def _address_matches_and_no_credentials(self) -> ResourceRecord:
        expected = make_address(self.component, self.kind, self.namespace, self.name)
        if self.address != expected:
            raise ValueError(f"address {self.address!r} does not match its object (expected {expected!r})")
        found = credentials.find_credentials(self.api_version, self.kind, self.owned)
        if found:
            raise ValueError(
                "owned fields hold credentials, which the state file never records: " + "; ".join(found)
            )
        return self


def _check_keys_are_addresses(records: Mapping[str, ResourceRecord]) -> dict[str, ResourceRecord]:
    for key, record in records.items():
        if key != record.address:
            raise ValueError(f"key {key!r} differs from the record's address {record.address!r}")
    return dict(sorted(records.items()))


class Generation(_Frozen):
    """One applied generation, kept for ``gpuplan state history`` and ``gpuplan rollback --to N``."""

    number: int = Field(ge=1, description="1, 2, 3...: the how-manieth applied generation of this lineage.")
    serial: int = Field(ge=0)
    applied_at: str
    spec_digest: str
    records: dict[str, ResourceRecord]
    user: str | None = None
    host: str | None = None
    changes: dict[str, int] | None = Field(
        default=None, description="How many changes of each action (create, update, ...) the apply made."
    )
    outcome: str | None = Field(default=None, description="applied, or rolled back to generation N.")
    node_labels: dict[str, dict[str, str]] = Field(default_factory=dict)
    """The node pools' labels gpuplan had written when this generation was applied (rollback restores
    them)."""
    node_pools: tuple[dict[str, Any], ...] = ()
    """The spec's node pools (``spec.nodePools``, as written) this generation was applied with: a rollback
    to it judges its gates by them."""
    spec: dict[str, Any] | None = None
    """The whole spec this generation was applied with (the keys it set): a rollback to it judges its gates
    (capacity, labels, driver) by it, and ``gpuplan state history --spec N`` prints it. None in generations
    recorded before gpuplan kept it."""

    @field_validator("records")
    @classmethod
    def _sorted_records(cls, records: dict[str, ResourceRecord]) -> dict[str, ResourceRecord]:
        return _check_keys_are_addresses(records)


class JournalEntry(_Frozen):
    """A write-ahead intent: recorded before a mutation, marked done after it (crash safety)."""

    address: str
    action: JournalAction
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    started_at: str
    state: JournalState = "pending"

    @model_validator(mode="after")
    def _no_credentials(self) -> JournalEntry:
        # The journal holds whole before/after objects; a Secret's data must be redacted there too.
        parts = self.address.split("/")
        kind = parts[1] if len(parts) > 2 else ""
        for side, manifest in (("before", self.before), ("after", self.after)):
            found = credentials.find_credentials("v1" if kind == "Secret" else "", kind, manifest or {})
            if found:
                raise ValueError(
                    f"{side} holds credentials, which the state file never records: " + "; ".join(found)
                )
        return self


MAX_SERIAL = 2**53 - 1
"""The largest serial: the largest integer every JSON reader keeps exactly (a bigger one is a damaged
file)."""


class StateFile(_Frozen):
    """The whole state: identity (lineage, serial), records, history and journal."""

    format_version: int = FORMAT_VERSION
    lineage: str
    serial: int = Field(ge=0, le=MAX_SERIAL)
    gpuplan_version: str
    # No defaults: a file without its records must be refused, never read as an empty state.
    resources: dict[str, ResourceRecord]
    history: tuple[Generation, ...] = Field(description="Applied generations, newest last.")
    journal: tuple[JournalEntry, ...]
    host_drivers: dict[str, str] = Field(
        default_factory=dict,
        description="Node -> the host driver version it reported at the last successful apply, when the "
        "driver is external and the spec pins no version: each node's driver is taken as it is, and a "
        "change from this record is drift.",
    )
    node_labels: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="node -> the labels gpuplan wrote on it for its node pool "
        "(nvidia.com/device-plugin.config, nvidia.com/mig.config), as written: the owned fields of nodes, "
        "which rollback restores and drift compares.",
    )
    operator_handover: dict[str, Any] | None = Field(
        default=None,
        description="What `gpuplan takeover` took from the GPU Operator and a rollback gives back: its "
        "Deployment and replica count, its ClusterPolicies, each adopted operand's ownerReferences, "
        "annotations and manifest (planner/apply/takeover.py). Kept until a rollback returns them.",
    )

    @field_validator("format_version")
    @classmethod
    def _current_format(cls, value: int) -> int:
        if value != FORMAT_VERSION:
            raise ValueError(
                f"format_version {value} is not the current format {FORMAT_VERSION} "
                "(older files are migrated when read)"
            )
        return value

    @field_validator("lineage")
    @classmethod
    def _lineage_is_uuid(cls, value: str) -> str:
        try:
            uuid.UUID(value)
        except ValueError:
            raise ValueError(f"lineage {value!r} is not a UUID") from None
        return value

    @field_validator("resources")
    @classmethod
    def _sorted_resources(cls, records: dict[str, ResourceRecord]) -> dict[str, ResourceRecord]:
        return _check_keys_are_addresses(records)

    @classmethod
    def new(cls, *, version: str | None = None) -> StateFile:
        """An empty state with a fresh lineage, serial 0: its first write gets serial 1."""
        return cls(
            lineage=str(uuid.uuid4()),
            serial=0,
            gpuplan_version=version or gpuplan_version(),
            resources={},
            history=(),
            journal=(),
        )

    # -- immutable updates -------------------------------------------------------------------------
    def with_operator_handover(self, handover: dict[str, Any] | None) -> StateFile:
        return self.model_copy(update={"operator_handover": handover})

    def next_serial(self) -> StateFile:
        return self.model_copy(update={"serial": self.serial + 1, "gpuplan_version": gpuplan_version()})

    def with_record(self, record: ResourceRecord) -> StateFile:
        return self._with_resources({**self.resources, record.address: record})

    def with_records(self, records: Iterable[ResourceRecord]) -> StateFile:
        return self._with_resources({**self.resources, **{record.address: record for record in records}})

    def without(self, *addresses: str) -> StateFile:
        """The state with these records removed; an unknown address is a :class:`StateError`."""
        for address in addresses:
            self.record(address)
        return self._with_resources({a: r for a, r in self.resources.items() if a not in addresses})

    def with_host_drivers(self, versions: Mapping[str, str]) -> StateFile:
        """The host driver versions the nodes reported (by node name), replacing the last ones."""
        return self.model_copy(update={"host_drivers": dict(sorted(versions.items()))})

    def tainted(self, address: str) -> StateFile:
        """Mark a record tainted: the next plan replaces it (Terraform's only non-ready status)."""
        record = self.record(address).model_copy(update={"status": "tainted"})
        return self.with_record(record)

    def with_generation(
        self,
        spec_digest: str,
        *,
        applied_at: str | None = None,
        limit: int = HISTORY_LIMIT,
        changes: Mapping[str, int] | None = None,
        outcome: str = "applied",
        node_pools: Sequence[Mapping[str, Any]] = (),
        spec: Mapping[str, Any] | None = None,
    ) -> StateFile:
        """Append the current records as the next applied generation (at this serial), keeping the last
        ``limit``; who applied it is this process's user and host."""
        kept = [g for g in self.history if g.serial != self.serial]
        generation = Generation(
            number=(self.history[-1].number if self.history else 0) + 1,
            serial=self.serial,
            applied_at=applied_at or now_rfc3339(),
            spec_digest=spec_digest,
            records=self.resources,
            user=current_user(),
            host=socket.gethostname(),
            changes=dict(sorted(changes.items())) if changes is not None else None,
            outcome=outcome,
            node_labels=self.node_labels,
            node_pools=tuple(dict(pool) for pool in node_pools),
            spec=dict(spec) if spec is not None else None,
        )
        return self.model_copy(update={"history": tuple([*kept, generation][-limit:])})

    def generation(self, serial: int) -> Generation:
        """The kept generation applied at state serial ``serial``."""
        for generation in self.history:
            if generation.serial == serial:
                return generation
        known = ", ".join(str(g.serial) for g in self.history) or "none"
        raise StateError(
            f"no applied generation with serial {serial} in the state", detail=f"serials kept: {known}"
        )

    def numbered(self, number: int) -> Generation:
        """The kept generation number ``number`` (``gpuplan state history`` lists them)."""
        for generation in self.history:
            if generation.number == number:
                return generation
        known = ", ".join(str(g.number) for g in self.history) or "none"
        raise StateError(
            f"no applied generation {number} in the state",
            detail=f"generations kept: {known}",
            hint="`gpuplan state history` lists them",
        )

    def with_journal_entry(self, entry: JournalEntry) -> StateFile:
        return self.model_copy(update={"journal": (*self.journal, entry)})

    def journal_done(self, address: str) -> StateFile:
        """Mark the newest pending intent for ``address`` done."""
        entries = list(self.journal)
        for index in range(len(entries) - 1, -1, -1):
            if entries[index].address == address and entries[index].state == "pending":
                entries[index] = entries[index].model_copy(update={"state": "done"})
                return self.model_copy(update={"journal": tuple(entries)})
        raise StateError(f"no pending journal entry for {address}")

    def pending_journal(self) -> tuple[JournalEntry, ...]:
        return tuple(entry for entry in self.journal if entry.state == "pending")

    def without_journal(self) -> StateFile:
        """Clear the journal, once an apply finished (or was rolled back) completely."""
        return self.model_copy(update={"journal": ()})

    # -- queries -------------------------------------------------------------------------------------
    def record(self, address: str) -> ResourceRecord:
        try:
            return self.resources[address]
        except KeyError:
            raise unknown_address(address, self.resources) from None

    def _with_resources(self, records: dict[str, ResourceRecord]) -> StateFile:
        return self.model_copy(update={"resources": dict(sorted(records.items()))})


def current_user() -> str:
    """Who runs gpuplan (a uid without a passwd entry, in a container, is named by number)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def unknown_address(address: str, known: Iterable[str]) -> StateError:
    """The error for an address the state does not hold, naming the nearest ones."""
    known = sorted(known)
    near = difflib.get_close_matches(address, known, n=5, cutoff=0.5)
    near += [k for k in known if address.lower() in k.lower() and k not in near][: 5 - len(near)]
    detail = (
        ("Did you mean: " + ", ".join(near))
        if near
        else (f"The state holds {len(known)} object(s)." if known else "The state holds no objects.")
    )
    return StateError(
        f"no object {address!r} in the state", detail=detail, hint="`gpuplan state list` shows every address"
    )


def to_document(state: StateFile) -> dict[str, Any]:
    """The JSON document of a state (the on-disk shape)."""
    document: dict[str, Any] = state.model_dump(mode="json")
    if not document["host_drivers"]:
        del document["host_drivers"]  # a stack that pins its driver, or owns it, records none
    for part in (document, *document["history"]):  # a stack without node pools keeps the file it always had
        if not part["node_labels"]:
            del part["node_labels"]
    for generation in document["history"]:
        if not generation["node_pools"]:
            del generation["node_pools"]
        if generation["spec"] is None:
            del generation["spec"]
    if document["operator_handover"] is None:
        del document["operator_handover"]  # no GPU Operator was taken over
    return document


def to_json(state: StateFile) -> str:
    """The one serialisation: sorted keys, two-space indent, a final newline."""
    return serialised(state)[0]


def content_key(state: StateFile) -> str:
    """What counts as the state's content: everything but serial and the writer's version (Terraform's
    rule)."""
    return _content_key(to_document(state))


def serialised(state: StateFile) -> tuple[str, str]:
    """:func:`to_json` and :func:`content_key` of ``state`` from one dump of it (a write needs both, an
    apply writes the state twice per change)."""
    document = to_document(state)
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n", _content_key(document)


def _content_key(document: Mapping[str, Any]) -> str:
    content = {key: value for key, value in document.items() if key not in ("serial", "gpuplan_version")}
    return json.dumps(content, sort_keys=True, separators=(",", ":"))
