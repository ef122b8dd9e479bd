"""``gpuplan takeover -f SPEC [--auto-approve] [--keep-operator]``: the GPU Operator's components handed to
gpuplan in place (design §7.4; the engine is :mod:`gpuplan.planner.apply.takeover`).

Thin. Under the state lock: reconcile an interrupted run's journal (as ``apply`` does), find the operator
(no operator, or a spec that does not render what it runs, is one ``Error:`` line naming the object and the
spec key), show the takeover (the operator stopped, the objects adopted, the plan of changes that follows,
which DaemonSets' pods restart and the fields why, what is removed at the end), confirm, carry it out. A
failed health gate undoes the walk and gives the cluster back to the operator; so does ``gpuplan rollback``
afterwards (:func:`give_back_command`, which ``rollback`` calls when the state holds a takeover).

Exit codes: 0 taken over; 1 failed (rolled back to the operator) or refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuplan.commands.interrupts import PLANNING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option
from gpuplan.context import Globals, state_backend

if TYPE_CHECKING:
    from gpuplan.planner.apply.takeover import TakeoverPlan
    from gpuplan.planner.plan.model import Plan
    from gpuplan.planner.spec.model import Spec
    from gpuplan.providers.kubernetes_write import KubernetesWriter
    from gpuplan.state.backend import StateBackend


@click.command(name="takeover")
@spec_option("The stack spec that renders the operator's components (gpuplan init --from-clusterpolicy).")
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else gpuplan.state.json beside the spec).",
)
@click.option("--auto-approve", is_flag=True, help="Take over without asking for confirmation.")
@click.option(
    "--keep-operator",
    is_flag=True,
    help="Keep the operator's Deployment at 0 replicas instead of deleting it (the ClusterPolicy goes).",
)
@lock_timeout_option()
@click.pass_context
def command(
    ctx: click.Context,
    spec_file: Path,
    state_path: Path | None,
    auto_approve: bool,
    keep_operator: bool,
    lock_timeout: float,
) -> int:
    """Hand the installed GPU Operator's components to gpuplan in place, one owner at every moment."""
    from gpuplan.planner.spec import model as spec_mod

    spec = spec_mod.load_spec(spec_file)
    backend = state_backend(spec_file, state_path)
    try:
        with backend.locked("takeover", lock_timeout), Globals.of(ctx).writer() as writer:
            return _takeover(
                ctx, spec, spec_file, backend, writer, auto_approve=auto_approve, keep_operator=keep_operator
            )
    finally:
        backend.close()


def _takeover(
    ctx: click.Context,
    spec: Spec,
    spec_file: Path,
    backend: StateBackend,
    writer: KubernetesWriter,
    *,
    auto_approve: bool,
    keep_operator: bool,
) -> int:
    from gpuplan.commands.apply import (
        confirm,
        failed_error,
        options_for,
        reconcile_journal,
        resume_interrupted_run,
        sigterm_interrupts,
    )
    from gpuplan.planner.apply import takeover
    from gpuplan.planner.driver import live_plan
    from gpuplan.planner.observe import operator
    from gpuplan.state.model import StateFile
    from gpuplan.views import colour, progress

    state = reconcile_journal(backend, writer, as_json=False) or StateFile.new()
    hooks = progress.for_stream(
        sys.stdout, as_json=False, palette=colour.for_stream(sys.stdout, allowed=Globals.of(ctx).color)
    )
    if state.journal:  # a takeover killed during its walk: verified or rolled back as apply does
        state = resume_interrupted_run(ctx, spec, backend, writer, hooks) or state
    resuming = takeover.unfinished(state)
    if resuming is not None:
        click.echo("An earlier takeover did not finish: it is resumed from what the state recorded.")
        keep_operator = keep_operator or bool(resuming.get("keep_operator"))

    def plan_for(at: StateFile) -> Plan:
        return live_plan.build(
            spec, at, writer, open_reader=Globals.of(ctx).live_reader, spec_file=str(spec_file)
        )

    with nothing_changed(PLANNING):
        install = operator.find(writer, spec.desired_objects(), resuming)
        planned = takeover.make(install, state, plan_for, keep_operator=keep_operator)
    click.echo(describe(planned))
    if not auto_approve:
        confirm("takeover")
    with sigterm_interrupts():
        result = takeover.apply(
            planned,
            spec=spec,
            backend=backend,
            writer=writer,
            plan_for=plan_for,
            hooks=hooks,
            options=options_for(ctx),
            report=click.echo,
        )
    if not result.ok:
        raise failed_error(result, command="takeover")
    return 0


def describe(planned: TakeoverPlan) -> str:
    """The takeover in the order it runs, for the user to review."""
    install = planned.install
    deployment = install.deployment.key
    policies = ", ".join(p.key.name for p in install.policies)
    lines = [
        f"gpuplan takeover: the GPU Operator in {install.namespace} (Deployment {deployment.name}, "
        f"{install.replicas} replica(s); ClusterPolicy {policies}) hands its components to stack "
        f"{planned.plan.stack}, one step at a time:",
        f"  1. scale Deployment {deployment.namespace}/{deployment.name} {install.replicas} -> 0 replicas "
        "(its reconcile stops first)",
        f"  2. adopt {len(install.operands)} object(s) in place, same names and selectors (ownerReferences "
        "to the ClusterPolicy and nvidia.com/last-applied-hash removed):",
        *(f"     <= {operand.desired.address}" for operand in install.operands),
    ]
    work = [c for c in planned.plan.changes if c.action != "no-op"]
    lines.append(f"  3. bring them to the spec: {len(work)} change(s) through apply's health gates")
    lines += [f"     {change.action} {change.address}" for change in work]
    restarts = planned.restarts
    if restarts:
        for restart in restarts:
            lines.append(
                f"     pods restart: {restart.address}: its pod template differs in "
                + ", ".join(restart.fields)
            )
    else:
        lines.append("     no pods restart: every pod template already matches the spec")
    kept = (
        f"Deployment {deployment.name} kept at 0 replicas (--keep-operator)"
        if planned.keep_operator
        else f"delete Deployment {deployment.namespace}/{deployment.name} (--keep-operator keeps it at 0)"
    )
    lines.append(f"  4. delete ClusterPolicy {policies}; {kept}")
    lines.append(
        "A failed health gate, or `gpuplan rollback` afterwards, gives everything back to the operator. "
        "The operator's Helm release keeps its templates: a helm upgrade of it would bring the "
        "ClusterPolicy back."
    )
    return "\n".join(lines)


def give_back_command(backend: StateBackend, writer: KubernetesWriter, *, auto_approve: bool) -> int:
    """``gpuplan rollback`` of a takeover: the cluster returned to the GPU Operator."""
    from gpuplan.commands.apply import confirm
    from gpuplan.planner.apply import takeover

    click.echo(
        "The newest generation took over from the GPU Operator: rolling back recreates its ClusterPolicy, "
        "gives it its operands back and scales the operator up again."
    )
    if not auto_approve:
        confirm("rollback")
    takeover.give_back(backend, writer, click.echo)
    return 0
