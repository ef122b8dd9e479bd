"""A saved plan applies exactly what was reviewed: the file seals its content, and apply checks the seal.

``gpuplan plan --out FILE`` writes the plan's document with two more keys: ``spec_text``, the spec file as it
was when the plan was made, and ``digest``, the SHA-256 of the document's canonical JSON without the digest.
Before a saved plan is applied:

1. :func:`unseal` recomputes the digest: a file edited after it was saved (an image tag changed with sed, a
   change dropped) is refused ("the plan file was modified after it was saved"); so is a file without a seal.
   The embedded spec must be the one the plan's ``spec_digest`` names.
2. :func:`check_spec`: the ``-f`` spec must be that spec too, unless the caller allows another (apply's
   ``--ignore-spec-mismatch``, which then applies the plan's own spec and says so).
3. :func:`check_content`: the desired objects are rendered again from the plan's spec for the cluster as it
   is now, and every change's ``after`` must be what was rendered, with no desired object missing and none
   added: a consistent edit that also fixed the digest is refused here.

The digest is no signature (anyone may recompute it); the re-render is what ties the plan's objects to its
spec, and the spec to the one the user passes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import ConfigError
from gpuplan.planner import graph
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import spec_digest
from gpuplan.planner.plan.decide import owned_fields
from gpuplan.planner.plan.model import Plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.snapshot import ClusterSnapshot, ObjectKey

SPEC_KEY = "spec_text"
DIGEST_KEY = "digest"
REPLAN = "make the plan again: gpuplan plan -f SPEC --out FILE"
_SHOWN = 5


@dataclass(frozen=True)
class SavedPlan:
    """A plan read from its file with the spec it was made from."""

    plan: Plan
    spec_text: str
    spec: Spec


def digest_of(document: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of ``document`` without its digest."""
    body = {key: value for key, value in document.items() if key != DIGEST_KEY}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def seal(document: Mapping[str, Any], spec_text: str) -> dict[str, Any]:
    """``document`` with the spec it was made from and the digest of both."""
    sealed = {**document, SPEC_KEY: spec_text}
    sealed[DIGEST_KEY] = digest_of(sealed)
    return sealed


def embedded_spec(spec_text: str, plan_digest: str, *, source: str) -> Spec:
    """The spec ``spec_text`` holds, which must be the one the plan was made from (``plan_digest``)."""
    try:
        spec = parse_spec(spec_text, filename=f"{source} (its spec)")
    except ConfigError as exc:
        raise ConfigError(
            "the spec inside the saved plan does not load", where=source, detail=exc.render(), hint=REPLAN
        ) from None
    if spec_digest(spec) != plan_digest:
        raise ConfigError(
            "the plan file was modified after it was saved: its spec is not the one the plan was made from",
            where=source,
            hint=REPLAN,
        )
    return spec


def unseal(document: Mapping[str, Any], *, source: str) -> tuple[dict[str, Any], str]:
    """The plan document without its seal, and its spec text; a ConfigError when the seal is missing or the
    content does not match it."""
    spec_text, digest = document.get(SPEC_KEY), document.get(DIGEST_KEY)
    if not isinstance(spec_text, str) or not isinstance(digest, str):
        raise ConfigError(
            "the plan file carries no seal (its spec and digest): it was not saved by this gpuplan",
            where=source,
            hint=REPLAN,
        )
    if digest_of(document) != digest:
        raise ConfigError(
            "the plan file was modified after it was saved (its content does not match its digest)",
            where=source,
            detail="a saved plan is applied exactly as reviewed, or not at all",
            hint=REPLAN,
        )
    return {key: value for key, value in document.items() if key not in (SPEC_KEY, DIGEST_KEY)}, spec_text


def check_spec(saved: SavedPlan, spec: Spec, *, source: str, allow_other: bool) -> Spec:
    """The spec to apply ``saved`` with: its own. A ``-f`` spec that is another one is refused, unless
    ``allow_other`` (the caller warns that the plan's own spec is applied)."""
    if spec_digest(spec) == saved.plan.spec_digest or allow_other:
        return saved.spec
    raise ConfigError(
        "the plan was made from another spec than the one given with -f",
        where=source,
        detail=f"the plan's spec is {saved.plan.spec_file} as it was when the plan was made; it has changed "
        "since",
        hint="apply with the spec the plan was made from, make the plan again, or pass "
        "--ignore-spec-mismatch to apply the plan's own spec",
    )


def check_content(saved: SavedPlan, snapshot: ClusterSnapshot, *, source: str) -> None:
    """Every change's ``after`` is the object the plan's spec renders now, and no desired object is missing
    from the plan or added to it."""
    plan = saved.plan
    wanted = {} if plan.destroy or plan.refresh_only else _rendered(saved.spec, plan, snapshot)
    planned = {change.address: change.after for change in plan.changes if change.action != "delete"}
    problems = [f"{address}: the plan has no change for it" for address in sorted(set(wanted) - set(planned))]
    problems += [
        f"{address}: not an object of the plan's spec" for address in sorted(set(planned) - set(wanted))
    ]
    problems += [
        f"{address}: its planned object is not what the spec renders"
        for address in sorted(set(wanted) & set(planned))
        if planned[address] != wanted[address]
    ]
    if problems:
        shown = problems[:_SHOWN] + (
            [f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else []
        )
        raise ConfigError(
            "the plan file was modified after it was saved: its changes are not what its spec renders",
            where=source,
            detail="\n".join(shown),
            hint=REPLAN,
        )


def _rendered(spec: Spec, plan: Plan, snapshot: ClusterSnapshot) -> dict[str, dict[str, Any]]:
    stack = spec.context_for(refresh.node_facts(snapshot))
    selected = graph.build(spec).with_dependencies(plan.targets) if plan.targets else None
    return {
        str(obj.address): owned_fields(ObjectKey.of(obj.manifest), obj.manifest)
        for obj in spec.desired_objects(stack)
        if selected is None or obj.address.component in selected
    }
