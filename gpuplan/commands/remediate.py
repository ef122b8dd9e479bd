"""``gpuplan drift report --remediate``: apply the reverse of the drift found on gpuplan's own objects.

Opt-in, and apply's machinery throughout: under the state lock, the journal of an interrupted apply
reconciled first (:func:`gpuplan.commands.apply.reconcile_journal`), a fresh plan
(:func:`gpuplan.planner.driver.live_plan.build`), the walker with its write guard, health gates and
automatic rollback. Only a plan that reverses drift is applied (:mod:`gpuplan.planner.drift.remediation`):
one with another change (the spec edited and not applied) or, without ``--allow-disruptive``, a driver change
that restarts driver pods is refused with one ``Error:`` line, nothing changed. Objects of other owners are
never a plan's changes. The walk's progress goes to stderr, so the report on stdout stays parseable.

Every remediation that applied something is logged: its plan document, the findings it answered, who ran it
and how it ended, as one entry of ConfigMap ``gpuplan-plan-log-<stack>`` in the stack's namespace
(:meth:`gpuplan.providers.stack_status.StatusWriter.append_plan_log`, bounded), so each automatic change can
be reviewed afterwards (``kubectl get configmap -n NS gpuplan-plan-log-STACK -o yaml``).

Then the cluster is checked again, and that report's verdict is the exit code and the stack's status: 0 the
drift was reversed and the check finds none, 2 drift remains (what gpuplan does not own: a foreign
component, a host's driver), 1 the remediation failed (rolled back as a failed apply is) or was refused.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuplan.commands.interrupts import PLANNING, nothing_changed
from gpuplan.context import Globals, state_backend

if TYPE_CHECKING:
    from gpuplan.planner.apply.model import ApplyResult
    from gpuplan.planner.drift.report import Report
    from gpuplan.planner.plan.model import Change, Plan
    from gpuplan.planner.spec.model import Spec

OPERATION = "remediate"
SHOWN = 5  # addresses an Error: line names before "and N more"


def remediate(
    ctx: click.Context,
    spec: Spec,
    spec_file: Path,
    state_path: Path | None,
    found: Report,
    *,
    allow_disruptive: bool,
    write_status: bool,
    lock_timeout: float = 0.0,
    recheck: Callable[[], Report] | None = None,
) -> int:
    """Reverse ``found``'s drift (see the module doc); ``recheck()`` makes the report that follows."""
    from gpuplan.commands import stack_status
    from gpuplan.commands.apply import failed_error, options_for, reconcile_journal, sigterm_interrupts
    from gpuplan.planner.apply.walker import apply
    from gpuplan.planner.driver import live_plan
    from gpuplan.views import colour, progress

    backend = state_backend(spec_file, state_path)
    try:
        with backend.locked(OPERATION, lock_timeout), Globals.of(ctx).writer() as writer:
            state = reconcile_journal(backend, writer, as_json=False)
            with nothing_changed(PLANNING):
                plan = live_plan.build(
                    spec, state, writer, open_reader=Globals.of(ctx).live_reader, spec_file=str(spec_file)
                )
            _check(plan, state.node_labels if state else {}, allow_disruptive=allow_disruptive)
            todo = _changes(plan)
            if not todo:
                click.echo("Nothing to remediate: no object gpuplan owns has drifted.", err=True)
                result: ApplyResult | None = None
            else:
                click.echo(
                    f"Remediating: {len(todo)} change(s) reverse the drift on gpuplan's objects.", err=True
                )
                hooks = progress.for_stream(
                    sys.stderr,
                    as_json=False,
                    palette=colour.for_stream(sys.stderr, allowed=Globals.of(ctx).color),
                )
                with sigterm_interrupts():
                    result = apply(
                        plan, spec=spec, backend=backend, writer=writer, hooks=hooks, options=options_for(ctx)
                    )
                _log(ctx, spec, plan, found, result)
    finally:
        backend.close()
    if result is not None and not result.ok:
        if write_status:
            stack_status.after_walk(ctx, spec, result, backend.read(), operation=OPERATION)
        raise failed_error(result, command=OPERATION)
    after: Report = recheck() if recheck is not None else found
    document = after.document()
    if write_status:
        stack_status.after_report(
            ctx, spec, document, last_applied=_last_applied(result) if result is not None else None
        )
    remaining = len(document["findings"])
    click.echo(
        "Remediated: the check that followed finds no drift."
        if not remaining
        else f"Remediation done; the check that followed still finds {remaining} finding(s) gpuplan cannot "
        "reverse (see `gpuplan drift report`).",
        err=True,
    )
    code: int = after.exit_code()
    return code


def _changes(plan: Plan) -> list[Change]:
    from gpuplan.planner.drift import remediation

    return remediation.changes(plan)


def _check(plan: Plan, recorded: Mapping[str, Mapping[str, str]], *, allow_disruptive: bool) -> None:
    """Refuse a plan that does more than reverse drift, or disrupts without leave (nothing changed yet)."""
    from gpuplan import errors
    from gpuplan.planner.drift import remediation

    others = remediation.not_drift(plan, recorded)
    if others:
        raise errors.GpuplanError(
            f"--remediate only reverses drift, and the plan has {len(others)} other change(s): "
            f"{_named(others)}",
            hint="review and apply them with `gpuplan plan` / `gpuplan apply`; nothing was changed",
        )
    disruptive = remediation.disruptive(plan)
    if disruptive and not allow_disruptive:
        raise errors.GpuplanError(
            f"reversing the drift would disrupt running work: {_named(disruptive)} "
            f"({disruptive[0].disruption or 'restarts driver pods and evicts GPU pods'})",
            hint="pass --allow-disruptive to remediate it anyway, or apply it yourself; nothing was changed",
        )


def _named(changes: list[Change]) -> str:
    shown = ", ".join(f"{c.action} {c.address}" for c in changes[:SHOWN])
    return shown + (f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else "")


def _last_applied(result: ApplyResult) -> dict[str, Any]:
    from gpuplan.commands.stack_status import who
    from gpuplan.state.model import now_rfc3339

    return {"time": now_rfc3339(), "by": who(), "operation": OPERATION}


def _log(ctx: click.Context, spec: Spec, plan: Plan, found: Report, result: ApplyResult) -> None:
    """One entry of the plan log: the plan applied, the findings it answered, who, when and how it ended."""
    from gpuplan.commands import stack_status
    from gpuplan.state.model import now_rfc3339

    when = now_rfc3339()
    entry = {
        "time": when,
        "by": stack_status.who(),
        "operation": OPERATION,
        "outcome": result.outcome.value,
        "message": result.message,
        "state_serial_before": plan.state_serial,
        "state_serial_after": result.serial,
        "findings": [f.document() for f in found.findings if f.address in {c.address for c in plan.changes}],
        "plan": plan.document(),
    }
    key = f"{when.replace(':', '')}-serial-{result.serial}.json"
    with stack_status.open_writer(ctx) as writer:
        problem = writer.append_plan_log(spec.metadata.name, spec.spec.namespace, key, entry)
    if problem:
        stack_status.warn(problem)
    else:
        click.echo(
            f"The plan applied is logged in ConfigMap {spec.spec.namespace}/gpuplan-plan-log-"
            f"{spec.metadata.name} (key {key}).",
            err=True,
        )
