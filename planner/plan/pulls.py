"""The plan's refusal of images its nodes cannot pull: a registry the cluster already shows unreachable.

A DaemonSet change that brings an image its nodes do not have yet (a create, or an update to another image)
makes each of its pods pull it. Where the refresh's evidence (:mod:`gpuplan.planner.observe.pull_failures`:
pods of that registry waiting on a pull that failed for the network, recent Failed Events) says a node cannot
reach the image's registry, that pod can only sit in ImagePullBackOff, its gate fail and the apply roll back.
So the plan is refused instead: one error per repository, naming the nodes and the components that pull it,
with the fix (a mirror the nodes reach, through ``spec.<component>.repository``). An image whose pods the
plan does not restart, or only restarts with an image already on their nodes (``IfNotPresent``), pulls
nothing and is not judged. Pure; called by :func:`gpuplan.planner.driver.live_plan.build`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuplan.planner.observe.pull_failures import PullFailures, registry_of
from gpuplan.planner.plan.model import Change, Finding, Plan, finding_order
from gpuplan.planner.spec.model import Spec

PULLING_ACTIONS = frozenset({"create", "update", "replace"})


def pulled_images(change: Change) -> tuple[str, ...]:
    """The images a DaemonSet change makes its pods pull: those of the new template that the old one did not
    run, and those it pulls on every start (``imagePullPolicy: Always``)."""
    if change.kind != "DaemonSet" or change.action not in PULLING_ACTIONS or change.after is None:
        return ()
    before = {image for image, _ in _containers(change.before)}
    return tuple(
        dict.fromkeys(
            image for image, policy in _containers(change.after) if image not in before or policy == "Always"
        )
    )


def _containers(daemonset: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    pod = (((daemonset or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    return [
        (str(container.get("image") or ""), str(container.get("imagePullPolicy") or ""))
        for key in ("initContainers", "containers")
        for container in pod.get(key) or ()
        if container.get("image")
    ]


def needs_reads(plan: Plan) -> bool:
    """Whether the plan pulls any image, so that the cluster's pull failures are worth reading."""
    return any(pulled_images(change) for change in plan.changes)


def repository_of(image: str) -> str:
    """``nvcr.io/nvidia/k8s-device-plugin`` of ``nvcr.io/nvidia/k8s-device-plugin:v0.20.1`` (or of a
    reference by digest)."""
    name = image.partition("@")[0]
    head, slash, last = name.rpartition("/")
    return f"{head}{slash}{last.partition(':')[0]}"


def configured_by(spec: Spec) -> dict[str, list[str]]:
    """Image repository -> the components whose ``repository`` and ``image`` name it (the device plugin and
    GFD share one), so a hint names the field that moves an image to a mirror."""
    found: dict[str, list[str]] = {}
    for name, config in spec.components().items():
        found.setdefault(f"{config.repository}/{config.image}", []).append(name)
    return found


@dataclass
class _Blocked:
    registry: str
    components: list[str] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)


def refusals(
    changes: Sequence[Change], failures: PullFailures, configured: Mapping[str, Sequence[str]]
) -> list[Finding]:
    """One error finding per node of each repository the changes pull on nodes that cannot reach its
    registry; the findings of one repository share their message, so the plan shows one line naming the
    nodes. ``configured``: :func:`configured_by`."""
    blocked: dict[str, _Blocked] = {}
    for change in changes:
        for image in pulled_images(change):
            registry = registry_of(image)
            failing = failures.on(registry, change.nodes)
            if not failing:
                continue
            entry = blocked.setdefault(repository_of(image), _Blocked(registry))
            if change.component not in entry.components:
                entry.components.append(change.component)
            for node, error in failing.items():
                entry.nodes.setdefault(node, error)
    return [
        finding
        for repository, entry in blocked.items()
        for finding in _findings(repository, entry, configured.get(repository) or entry.components)
    ]


def _findings(repository: str, entry: _Blocked, setters: Sequence[str]) -> Iterable[Finding]:
    errors = "; ".join(sorted(set(entry.nodes.values())))
    message = (
        f"{repository}: these nodes cannot reach {entry.registry} (their pulls from it fail with "
        f"{errors}), so the pods of {_listed(entry.components)} cannot pull it there"
    )
    fields = _listed([f"spec.{component}.repository" for component in setters])
    hint = (
        f"pull it from a mirror these nodes reach: set {fields} to the mirror (with imagePullSecrets if "
        f"it needs a login), or let the nodes reach {entry.registry} (DNS, firewall, proxy)"
    )
    for node in entry.nodes:
        yield Finding(severity="error", component=setters[0], node=node, message=message, hint=hint)


def _listed(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def with_refusals(plan: Plan, failures: PullFailures, configured: Mapping[str, Sequence[str]]) -> Plan:
    """``plan`` with the refusals of ``failures`` among its findings and blockers, and the reads'
    requests counted in its own."""
    found = refusals(plan.changes, failures, configured)
    update: dict[str, Any] = {"api_requests": plan.api_requests + failures.requests}
    if found:
        findings = sorted([*plan.findings, *found], key=finding_order)
        blockers = [f"compatibility error on node {f.node}: {f.message}" for f in found]
        update |= {"findings": tuple(findings), "blockers": (*plan.blockers, *blockers)}
    return plan.model_copy(update=update)
