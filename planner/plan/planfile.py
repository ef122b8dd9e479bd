"""Saved plans (``gpuplan plan --out FILE``): writing, reading, and the checks apply makes before using one.

A saved plan is the plan's JSON document (:meth:`gpuplan.planner.plan.build.Plan.document`, the same as ``plan
--json``), written atomically (temporary file created 0600, fsync, rename, folder fsync) and never with
credentials: every object in it is checked with the state's credential rule first. It is bound to the state
it was made from (lineage and serial) and to every live object the refresh read.

Apply calls :func:`check_fresh` with the current state and a new snapshot, and
:func:`check_applicable`; ``gpuplan show`` calls :func:`read`. Unlike Terraform, which compares only the state
serial, a live object that changed since the plan was made also makes it stale: the plan's
before/after values described an object that is no longer there.

What "changed" means (the rule, :func:`_changed_objects`): a live object is held to its
:class:`~gpuplan.providers.snapshot.Fingerprint`, not to its resourceVersion. The resourceVersion moves on
every write, status included, and a DaemonSet's status is written whenever one of its pods restarts or a node
joins, so holding a plan to it would refuse every saved plan on a live cluster. An object has changed when

- it is gone, or new (its reference was not read when the plan was made);
- its uid differs: it was deleted and created again, and is another object;
- its ``metadata.generation`` differs (kinds that have one: DaemonSet, Deployment, custom resources): the
  server moves it on every spec change and never on a status write;
- a digest of its content that generation does not cover differs: labels, annotations (less those
  controllers write after a spec change), owner references, finalizers, a deletion in progress, and for kinds
  without a generation (ConfigMap, ServiceAccount, RBAC, Service, RuntimeClass) every field but ``status``
  (``data``, ``rules``, ``subjects``, ``spec`` ...).

This is stricter than the fields gpuplan owns (a hand-added label or a ``kubectl rollout restart`` also makes
the plan stale), on purpose: the plan's conflicts and ownership come from labels, annotations and owners, and
a reviewed plan should be applied to the objects that were reviewed. The writes themselves are guarded by
field (planner/apply/steps.py ``_guarded``). Plans saved by an older gpuplan carry no fingerprints and keep
the old rule (every resourceVersion must match), with a hint that a new plan is held to content only.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from gpuplan.errors import ConfigError, GpuplanError, StalePlanError, StateError
from gpuplan.fileio import PLAN_LIMIT, read_text_bounded
from gpuplan.planner.plan import sealed
from gpuplan.planner.plan.decide import with_undo
from gpuplan.planner.plan.model import FORMAT_VERSION, Plan
from gpuplan.providers.snapshot import ClusterSnapshot, Fingerprint
from gpuplan.state import credentials, files
from gpuplan.state.model import StateFile

_Seen = TypeVar("_Seen", str, Fingerprint)
"""What a plan remembers of an object: its resourceVersion (older plans) or its fingerprint."""

REPLAN_HINT = "run `gpuplan plan --out FILE` again and review the new plan"
OLD_PLAN_HINT = (
    "this plan was saved by an older gpuplan, which holds live objects to their resourceVersion, "
    "so a status update (a pod restarting) also makes it stale; a plan saved now is stale only "
    "when an object's content changes: " + REPLAN_HINT
)
_SHOWN = 10  # stale objects named one by one; the rest are counted


class PlanNotApplicableError(GpuplanError):
    """The plan can be shown and saved, but apply refuses it (conflicts, compatibility errors)."""


def _credential_problems(plan: Plan) -> list[str]:
    problems = []
    for change in plan.changes:
        for side, manifest in (("before", change.before), ("after", change.after)):
            if not manifest:
                continue
            api_version = str(manifest.get("apiVersion", ""))
            for found in credentials.find_credentials(api_version, change.kind, manifest):
                problems.append(f"{change.address} ({side}) {found}")
    return problems


def dumps(plan: Plan) -> str:
    """The plan's JSON document in its own key order (components in graph order)."""
    return json.dumps(plan.document(), indent=2, ensure_ascii=False) + "\n"  # keys in graph order


def write(path: Path, plan: Plan, *, spec_text: str) -> None:
    """Write ``plan``, sealed with ``spec_text`` (the spec file it was made from, :mod:`.sealed`), to
    ``path`` atomically with mode 0600; refuse (nothing written) if it holds credentials, or if
    ``spec_text`` is not the spec the plan was made from (the file changed while planning)."""
    problems = _credential_problems(plan)
    if problems:
        raise StateError(
            "the plan holds credentials, which saved plans never record",
            where=str(path),
            detail="\n".join(problems[:_SHOWN]),
        )
    try:
        sealed.embedded_spec(spec_text, plan.spec_digest, source=str(path))
    except ConfigError:
        raise ConfigError(
            "the spec file changed while the plan was made: nothing was saved",
            where=plan.spec_file,
            hint="make the plan again",
        ) from None
    document = sealed.seal(plan.document(), spec_text)
    data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        files.write_atomically(Path(path), data)
    except OSError as exc:
        raise StateError(
            f"cannot write the plan: {exc.strerror or exc}",
            where=str(path),
            hint=_WRITE_HINTS.get(exc.errno or 0, "check the path given to --out and the space left there"),
        ) from None


_WRITE_HINTS = {
    errno.ENOENT: "the folder does not exist: create it, or pass --out a path in an existing folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder: pass --out a path in an existing folder",
    errno.EACCES: "the user running gpuplan may not write there: pass --out a path in a folder you own",
    errno.EPERM: "the user running gpuplan may not write there: pass --out a path in a folder you own",
    errno.EROFS: "the file system is read-only: save the plan elsewhere",
    errno.ENOSPC: "the disk is full: free space, or save the plan elsewhere",
    errno.EISDIR: "the path is a folder: pass --out a file name",
}
"""Hints for the OS errors a plan's write meets, by errno (the error line names the file)."""


def read(path: Path) -> Plan:
    """Read a saved plan (its seal checked); a missing, malformed, foreign or edited file is a ConfigError
    naming it."""
    return read_saved(path).plan


def read_saved(path: Path) -> sealed.SavedPlan:
    """A saved plan with the spec it was made from; its seal checked (:func:`gpuplan.planner.plan.sealed.
    unseal`)."""
    source = str(path)
    try:
        text = read_text_bounded(path, limit=PLAN_LIMIT, what="saved plan", error=ConfigError)
    except ConfigError as exc:
        exc.hint = "pass a file written by `gpuplan plan --out FILE`"
        raise
    document = _document(text, source=source)
    body, spec_text = sealed.unseal(document, source=source)
    plan = _plan(body, source=source)
    return sealed.SavedPlan(plan, spec_text, sealed.embedded_spec(spec_text, plan.spec_digest, source=source))


def loads(text: str, *, source: str = "<plan>") -> Plan:
    """A plan from its JSON document (``plan --json``; a sealed file's seal is not checked here)."""
    document = {
        key: value
        for key, value in _document(text, source=source).items()
        if key not in (sealed.SPEC_KEY, sealed.DIGEST_KEY)
    }
    return _plan(document, source=source)


_HINT = "pass a file written by `gpuplan plan --out FILE`"


def _document(text: str, *, source: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"the saved plan is not JSON: {exc}", where=source, hint=_HINT) from None
    except RecursionError:
        raise ConfigError(
            "the saved plan is nested too deeply to be a plan", where=source, hint=_HINT
        ) from None
    if not isinstance(document, dict) or "changes" not in document or "format_version" not in document:
        raise ConfigError(
            "not a gpuplan saved plan (no format_version and changes)", where=source, hint=_HINT
        )
    if document["format_version"] != FORMAT_VERSION:
        raise ConfigError(
            f"saved plan format {document['format_version']!r} is not supported (this gpuplan "
            f"reads format {FORMAT_VERSION!r})",
            where=source,
            hint="make the plan again with this gpuplan version",
        )
    return document


def _plan(document: Mapping[str, Any], *, source: str) -> Plan:
    try:
        plan = Plan.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"the saved plan is malformed at {where}: {first['msg']}", where=source, hint=_HINT
        ) from None
    # a plan saved before every delete and replace carried its undo note gets the note it has now, so what
    # the user reads before confirming comes from the plan document alone
    return plan.model_copy(update={"changes": tuple(with_undo(change) for change in plan.changes)})


def check_fresh(plan: Plan, state: StateFile | None, snapshot: ClusterSnapshot, *, source: str = "") -> None:
    """Raise StalePlanError naming what changed since ``plan`` was made: the state (lineage, serial) or a live
    object (gone, new, recreated, its spec or its content changed: the rule in the module docstring).
    ``source``: the plan file, which the error names."""
    lineage = state.lineage if state else None
    serial = state.serial if state else 0
    if plan.state_lineage is not None and lineage is not None and plan.state_lineage != lineage:
        raise StalePlanError(
            "Saved plan does not match the given state",
            detail=f"the plan was made from state lineage {plan.state_lineage}; this state has "
            f"lineage {lineage}",
            hint="use the state file the plan was made with",
            where=source,
        )
    problems = []
    if serial != plan.state_serial or (plan.state_lineage is None) != (lineage is None):
        problems.append(
            f"state serial {plan.state_serial} -> {serial}: the state was changed by another "
            "operation after the plan was made"
        )
    hint = REPLAN_HINT
    if plan.fingerprints is not None:
        problems += _changed_objects(plan.fingerprints, snapshot.content_fingerprints())
    else:
        moved = _moved_objects(plan.resource_versions, snapshot.resource_versions())
        problems += moved
        hint = OLD_PLAN_HINT if moved else REPLAN_HINT
    if problems:
        shown = problems[:_SHOWN] + (
            [f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else []
        )
        raise StalePlanError("Saved plan is stale", detail="\n".join(shown), hint=hint, where=source)


def _changed_objects(planned: Mapping[str, Fingerprint], current: Mapping[str, Fingerprint]) -> list[str]:
    def changed(before: Fingerprint, after: Fingerprint) -> str:
        if before.uid != after.uid:
            return f"was deleted and created again after the plan was made (uid {before.uid} -> {after.uid})"
        return f"changed after the plan was made: {_what_changed(before, after)}"

    return _compared(planned, current, changed)


def _what_changed(before: Fingerprint, after: Fingerprint) -> str:
    """``its spec changed (generation 3 -> 4); its metadata.labels changed``: the parts that moved."""
    reasons = []
    if before.generation != after.generation:
        reasons.append(f"its spec changed (generation {before.generation} -> {after.generation})")
    parts = sorted(
        part
        for part in set(before.content) | set(after.content)
        if before.content.get(part) != after.content.get(part)
    )
    if parts:
        reasons.append(f"its {', '.join(parts)} changed")
    return "; ".join(reasons)


def _moved_objects(planned: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The rule of plans without fingerprints (saved by an older gpuplan): every resourceVersion must
    match."""
    return _compared(
        planned,
        current,
        lambda before, after: f"changed after the plan was made (resourceVersion {before} -> {after})",
    )


def _compared(
    planned: Mapping[str, _Seen], current: Mapping[str, _Seen], changed: Callable[[_Seen, _Seen], str]
) -> list[str]:
    """One line per object that is gone, new, or ``changed`` (its words) since the plan, by reference."""
    problems = []
    for ref in sorted(set(planned) | set(current)):
        before, after = planned.get(ref), current.get(ref)
        if before == after:
            continue
        if after is None:
            problems.append(f"{ref} was deleted after the plan was made")
        elif before is None:
            problems.append(f"{ref} appeared after the plan was made")
        else:
            problems.append(f"{ref} {changed(before, after)}")
    return problems


def check_applicable(plan: Plan, *, source: str = "") -> None:
    """Raise PlanNotApplicableError when the plan has blockers (unresolved conflicts, compatibility
    errors); ``source``: the plan file, when it is a saved one."""
    if plan.applicable:
        return
    resolutions: list[str] = [
        resolution.command for conflict in plan.conflicts for resolution in conflict.resolutions[:1]
    ]
    hint = (
        ("resolve the conflicts (e.g. " + "; ".join(resolutions) + ") and plan again")
        if resolutions
        else "fix the findings and plan again"
    )
    raise PlanNotApplicableError(
        "this plan cannot be applied", detail="\n".join(plan.blockers), hint=hint, where=source
    )


def check(plan: Plan, state: StateFile | None, snapshot: ClusterSnapshot, *, source: str = "") -> None:
    """Both checks apply makes before walking a saved plan: applicable, then fresh; each refusal names
    ``source``, the plan file."""
    check_applicable(plan, source=source)
    check_fresh(plan, state, snapshot, source=source)
