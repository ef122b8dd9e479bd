"""The last step of ``apply``, ``rollback`` and ``drift report``: the stack's status written to its
``GPUStack`` object (design §7.3), so ``kubectl get gpustacks`` shows READY, DRIFTED and SERIAL.

The status is built by the engine (:func:`gpuplan.planner.apply.stack_status.after_walk` from the walk's
result and each component's DaemonSets as the walk left them; :func:`gpuplan.planner.drift.stack_status.
from_report` from the report's document) and written by :class:`gpuplan.providers.stack_status.
StatusWriter`. A status that cannot be written (the CRD missing, no permission, the server gone) is one
``Warning:`` line on stderr and never changes the command's exit code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from gpuplan.context import Globals

if TYPE_CHECKING:
    from gpuplan.planner.apply.model import ApplyResult
    from gpuplan.planner.spec.model import Spec
    from gpuplan.providers.stack_status import StatusWriter
    from gpuplan.state.model import StateFile


def who() -> str:
    """``user@host``, as the state lock names its holder."""
    from gpuplan.state.lock import LockInfo

    holder = LockInfo.for_this_process("status")
    return f"{holder.user}@{holder.host}"


def open_writer(ctx: click.Context) -> StatusWriter:
    from gpuplan.providers.stack_status import StatusWriter

    options = Globals.of(ctx)
    return StatusWriter(kubeconfig=options.kubeconfig, context=options.context)


def after_walk(
    ctx: click.Context,
    spec: Spec,
    result: ApplyResult,
    state: StateFile | None,
    *,
    operation: str | None = None,
) -> None:
    """Write the status an apply or rollback leaves (see the module doc)."""
    from gpuplan.planner.apply import stack_status
    from gpuplan.state.model import now_rfc3339

    with contextlib.closing(open_writer(ctx)) as writer:
        try:
            nodes, versions = daemonsets(writer, state)
            running = host_versions(writer)
        except Exception as exc:  # a status is never worth failing the apply for: its write warns instead
            warn(f"the GPUStack {spec.metadata.name}'s status was not written: {exc}")
            return
        status = stack_status.after_walk(
            result,
            spec.components(),
            nodes,
            now=now_rfc3339(),
            by=who(),
            operation=operation,
            versions=versions,
            running=running,
        )
        _write(writer, spec, status)


def after_report(
    ctx: click.Context,
    spec: Spec,
    document: Mapping[str, Any],
    *,
    last_applied: Mapping[str, Any] | None = None,
) -> None:
    """Write the status a drift report found (its only write); ``last_applied``: the remediation it made."""
    from gpuplan.planner.drift import stack_status

    status = stack_status.from_report(document, spec.components())
    if last_applied is not None:
        status["lastApplied"] = dict(last_applied)
    with contextlib.closing(open_writer(ctx)) as writer:
        _write(writer, spec, status)


def daemonsets(
    writer: StatusWriter, state: StateFile | None
) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """component -> (numberReady, desiredNumberScheduled) summed over its DaemonSets in the state, and
    component -> the version its DaemonSet runs (the driver's release, else the main container's tag)."""
    from gpuplan.modules.driver import driver_release
    from gpuplan.providers.snapshot import ObjectKey

    counts: dict[str, tuple[int, int]] = {}
    versions: dict[str, str] = {}
    for record in (state.resources if state is not None else {}).values():
        if record.kind != "DaemonSet":
            continue
        live = writer.read(ObjectKey(record.api_version, record.kind, record.namespace, record.name))
        status = (live.manifest.get("status") or {}) if live is not None else {}
        ready, desired = counts.get(record.component, (0, 0))
        counts[record.component] = (
            ready + int(status.get("numberReady") or 0),
            desired + int(status.get("desiredNumberScheduled") or 0),
        )
        if live is not None:
            version = driver_release(live.manifest) if record.component == "driver" else _tag(live.manifest)
            if version:
                versions.setdefault(record.component, version)
    return counts, versions


def host_versions(writer: StatusWriter) -> dict[str, str]:
    """What the GPU nodes report of the components gpuplan may leave to the host (the driver's versions)."""
    from gpuplan.modules.stack_status import host_versions as versions_of
    from gpuplan.planner.facts import NodeFacts

    def driver(node: dict[str, Any]) -> str | None:
        facts = NodeFacts.from_node(node)
        return facts.driver_version if facts.has_nvidia_gpu else None

    drivers: list[str | None] = writer.list_reduced("v1", "Node", driver)
    return versions_of(drivers)


def _tag(manifest: Mapping[str, Any]) -> str | None:
    """The main (first) container's image tag or digest."""
    containers = (((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    image = str(((containers or [{}])[0]).get("image") or "")
    if "@" in image:
        return image.rsplit("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def _write(writer: StatusWriter, spec: Spec, status: Mapping[str, Any]) -> None:
    from gpuplan.state.model import now_rfc3339

    problem = writer.write_status(
        spec.metadata.name,
        status,
        now=now_rfc3339(),
        namespace=spec.spec.namespace,
        expect_crd=spec.spec.validator.owner == "gpuplan",  # the validator renders the CRD
    )
    if problem:
        warn(problem)


def warn(text: str) -> None:
    click.echo(f"Warning: {text}", err=True)
