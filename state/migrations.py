"""State format migrations: older documents are upgraded one step at a time when they are read.

Caller: :func:`gpuplan.state.document.parse_state`, before the document is validated as the current
:class:`gpuplan.state.model.StateFile`. A migrated state is only held in memory; it reaches the disk with the
next write (whose serial is above the stored one), as Terraform upgrades ``terraform.tfstate`` v3 to v4.

Formats:

- **1**, the first released shape (design §3.2 minimum): ``format_version``, ``lineage``, ``serial``,
  ``gpuplan_version`` and ``resources`` as a *list* of records, each with ``address``, ``component``,
  ``api_version``, ``kind``, ``namespace``, ``name``, ``owned``, ``uid``, ``resource_version``,
  ``generation``. No record status, no history, no journal.
- **2**, the current one (:mod:`gpuplan.state.model`): ``resources`` keyed by address, each record with a
  ``status`` (ready | tainted) and the ``applied_serial`` that wrote it; ``history`` of applied generations
  and the apply ``journal``.

A step is a function from the document of format N to format N+1, registered in ``_STEPS``; a new format adds
one step and a golden-file pair in ``state/testdata`` (``vN-*.in.json`` -> ``.out.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from gpuplan.errors import StateError
from gpuplan.state.model import FORMAT_VERSION

Document = dict[str, Any]


class _RecordV1(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    address: str
    component: str
    api_version: str
    kind: str
    namespace: str | None = None
    name: str
    owned: dict[str, Any]
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None


class _StateV1(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    format_version: int
    lineage: str
    serial: int
    gpuplan_version: str
    resources: list[_RecordV1]

    @model_validator(mode="after")
    def _unique_addresses(self) -> _StateV1:
        seen: set[str] = set()
        for record in self.resources:
            if record.address in seen:
                raise ValueError(f"resources: address {record.address!r} appears twice")
            seen.add(record.address)
        return self


def _v1_to_v2(document: Document) -> Document:
    """Records keyed by address (sorted), each ``ready`` and stamped with the file's serial; empty history
    and journal."""
    v1 = _StateV1.model_validate(document)
    resources = {
        record.address: {**record.model_dump(), "status": "ready", "applied_serial": v1.serial}
        for record in sorted(v1.resources, key=lambda record: record.address)
    }
    return {
        "format_version": 2,
        "lineage": v1.lineage,
        "serial": v1.serial,
        "gpuplan_version": v1.gpuplan_version,
        "resources": resources,
        "history": [],
        "journal": [],
    }


_STEPS: dict[int, Callable[[Document], Document]] = {1: _v1_to_v2}
OLDEST_FORMAT = min(_STEPS)


def format_of(document: Any, *, source: str) -> int:
    """The ``format_version`` of a parsed document, or a :class:`StateError` saying why there is none.

    Errors carry ``where`` but no hint: the caller knows what the user can do about the file.
    """
    if not isinstance(document, dict):
        raise StateError(
            f"the state file holds a JSON {type(document).__name__}, not an object", where=source
        )
    if "format_version" not in document:
        raise StateError("format_version: field required (every gpuplan state file has one)", where=source)
    version = document["format_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise StateError(f"format_version: expected an integer, got {version!r}", where=source)
    return version


def upgrade(document: Any, *, source: str) -> Document:
    """The document in the current format, upgraded step by step from whatever older format it has.

    May raise pydantic's ``ValidationError`` from a step (the caller turns it into a StateError with the
    field path) or :class:`StateError` for a format this gpuplan does not know.
    """
    version = format_of(document, source=source)
    if version > FORMAT_VERSION:
        writer = document.get("gpuplan_version", "unknown")
        raise StateError(
            f"the state file has format {version}, created by a newer gpuplan {writer}; "
            f"this gpuplan reads formats up to {FORMAT_VERSION}",
            where=source,
            hint=f"upgrade gpuplan to {writer} or later",
        )
    if version < OLDEST_FORMAT:
        raise StateError(
            f"format_version {version} is not a gpuplan state format "
            f"(known: {OLDEST_FORMAT} to {FORMAT_VERSION})",
            where=source,
        )
    upgraded: Document = document
    while version < FORMAT_VERSION:
        upgraded = _STEPS[version](upgraded)
        version += 1
    return _numbered_generations(upgraded)


def _numbered_generations(document: Document) -> Document:
    """Format 2 as first written had no generation ``number`` (nor user, host, changes, outcome): those
    generations are numbered by their place in the kept history, after the last numbered one before them.
    Within the format: the new keys are additions a reader of the format can do without."""
    history = document.get("history")
    if not isinstance(history, list) or all(not isinstance(g, dict) or "number" in g for g in history):
        return document
    numbered, previous = [], 0
    for generation in history:
        if isinstance(generation, dict):
            generation = {"number": previous + 1, **generation}
            number = generation["number"]
            previous = number if isinstance(number, int) else previous
        numbered.append(generation)
    return {**document, "history": numbered}
