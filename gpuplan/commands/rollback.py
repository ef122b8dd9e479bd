"""``gpuplan rollback -f SPEC [--to N]``: return the cluster to an applied generation, through apply.

Thin. Under the state lock, held for the whole command and released on every exit path:
reconcile the journal of an interrupted apply (as ``apply`` does), pick the generation (``--to N``, a
generation number of ``gpuplan state history``, by default the one before the newest; an unknown number is an
error that lists the kept ones; a serial, what ``--to`` took before generations were numbered, is still read
when unambiguous), plan the return with :func:`gpuplan.planner.plan.rollback.rollback_plan`, show it with
the plan's human view, ask for confirmation (``--auto-approve``, else a terminal must answer ``yes``) and
apply it with the apply engine: the same ordering, health gates, node-by-node driver rollout and automatic
undo on failure. The applied rollback becomes a new generation of the state's history.

Progress is apply's (:mod:`gpuplan.views.progress`); the walker words its verdicts for a rollback (the
operation it is told): success names the generation returned to and the serial it is kept as; a failure is
the final ``Error: Rollback failed: ...`` line (:func:`gpuplan.commands.apply.failed_error`).

Exit codes: 0 rolled back (or nothing to do); 1 failed (the message says whether the rollback was itself
undone) or refused (no terminal to confirm on, or ``--json`` without ``--auto-approve``: the error names
rollback).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuplan.commands.interrupts import PLANNING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option
from gpuplan.context import Globals, state_backend

if TYPE_CHECKING:
    from gpuplan.planner.apply.model import ApplyHooks
    from gpuplan.planner.spec.model import Spec
    from gpuplan.providers.kubernetes_write import KubernetesWriter
    from gpuplan.state.backend import StateStore
    from gpuplan.state.model import Generation


@click.command(name="rollback")
@spec_option("The stack spec (gpustack.yaml): the stack's name, namespace and state file.")
@click.option(
    "--to",
    "serial",
    metavar="N",
    type=click.IntRange(min=0),
    default=None,
    help="The generation to return to, by its number in `gpuplan state history` (default: the previous).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else gpuplan.state.json beside the spec).",
)
@click.option("--auto-approve", is_flag=True, help="Roll back without asking for confirmation.")
@click.option(
    "--json", "as_json", is_flag=True, help="Stream one JSON event per line (needs --auto-approve)."
)
@lock_timeout_option()
@click.pass_context
def command(
    ctx: click.Context,
    spec_file: Path,
    serial: int | None,
    state_path: Path | None,
    auto_approve: bool,
    as_json: bool,
    lock_timeout: float,
) -> int:
    """Plan and apply the return to an earlier applied generation of the state's history."""
    from gpuplan.planner.spec import model as spec_mod

    spec = spec_mod.load_spec(spec_file)
    backend = state_backend(spec_file, state_path)
    try:
        with backend.locked("rollback", lock_timeout), Globals.of(ctx).writer() as writer:
            return _rollback(
                ctx,
                spec,
                spec_file,
                backend,
                writer,
                serial=serial,
                auto_approve=auto_approve,
                as_json=as_json,
            )
    finally:
        backend.close()


def _rollback(
    ctx: click.Context,
    spec: Spec,
    spec_file: Path,
    backend: StateStore,
    writer: KubernetesWriter,
    *,
    serial: int | None,
    auto_approve: bool,
    as_json: bool,
) -> int:
    import sys

    from gpuplan.commands import stack_status
    from gpuplan.commands.apply import (
        confirm,
        failed_error,
        no_changes_result,
        no_changes_summary,
        options_for,
        reconcile_journal,
        sigterm_interrupts,
    )
    from gpuplan.commands.plan import render
    from gpuplan.planner.apply.model import Operation
    from gpuplan.planner.apply.walker import apply
    from gpuplan.planner.driver import live_plan
    from gpuplan.planner.plan import planfile, rollback
    from gpuplan.views import colour, progress

    state = reconcile_journal(backend, writer, as_json=as_json)
    from gpuplan.planner.apply import takeover

    if serial is None and takeover.rolls_back(state):
        from gpuplan.commands.takeover import give_back_command

        return give_back_command(backend, writer, auto_approve=auto_approve)
    generation = rollback.choose_generation(state, serial)
    assert state is not None  # choose_generation refuses without a state
    with nothing_changed(PLANNING):
        plan = live_plan.build_rollback(
            spec, state, generation, writer, open_reader=Globals.of(ctx).live_reader, spec_file=str(spec_file)
        )
    if not as_json:
        click.echo(
            f"Rolling back to generation {generation.number} (serial {generation.serial}, applied "
            f"{generation.applied_at}, "
            f"{len(generation.records)} object(s)); the state is at serial {state.serial}.\n"
            "Kept generations:\n" + "\n".join(f"  {line}" for line in rollback.describe_history(state)) + "\n"
        )
        render(ctx, plan.document(), as_json=False)
    planfile.check_applicable(plan)
    hooks = progress.for_stream(
        sys.stdout, as_json=as_json, palette=colour.for_stream(sys.stdout, allowed=Globals.of(ctx).color)
    )
    if not plan.has_changes:
        # the plan shown ends with "No changes."; this line says what that was measured against
        hooks.on_event(
            no_changes_summary(
                f"Nothing to roll back: the cluster already matches generation {generation.number}."
            )
        )
        stack_status.after_walk(ctx, spec, no_changes_result(state), state)
        _tell_disagreements(
            hooks, spec, spec_file, rollback.rollback_spec(spec, generation), generation, backend
        )
        return 0
    if not auto_approve:
        confirm("rollback", as_json=as_json)
    target = rollback.rollback_spec(spec, generation)
    options = dataclasses.replace(
        options_for(ctx), operation=Operation.ROLLBACK, returning_to=generation.number
    )
    with sigterm_interrupts():
        result = apply(plan, spec=target, backend=backend, writer=writer, hooks=hooks, options=options)
    stack_status.after_walk(ctx, target, result, backend.read())
    if not result.ok:
        raise failed_error(result, command="rollback")
    _tell_disagreements(hooks, spec, spec_file, target, generation, backend)
    return 0


def _tell_disagreements(
    hooks: ApplyHooks,
    spec: Spec,
    spec_file: Path,
    restored: Spec,
    generation: Generation,
    backend: StateStore,
) -> None:
    """A rollback leaves the spec file as it is: say what it still asks for that the cluster now does not
    run, what follows from that, and the command that makes the file the generation's spec."""
    from gpuplan.planner.apply.model import ApplyEvent
    from gpuplan.planner.plan.rollback import disagreements

    differing = disagreements(spec, restored)
    if not differing:
        return
    lines = "\n".join(
        f"  {path}: {_value(wanted)} (generation {generation.number}: {_value(running)})"
        for path, wanted, running in differing
    )
    keep = (
        f"gpuplan state history --state {shlex.quote(backend.where)} --spec {generation.number} "
        f"> {shlex.quote(str(spec_file))}"
        if generation.spec is not None
        else f"edit {spec_file} to say what generation {generation.number} does"
    )
    hooks.on_event(
        ApplyEvent(
            "note",
            f"Note: {spec_file} still asks for what generation {generation.number} does not run:\n{lines}\n"
            f"Until they agree, `gpuplan plan --detailed-exitcode` exits 2 (a scheduled report says changes "
            f"are pending) and the next `gpuplan apply -f {spec_file}` changes the cluster back to the spec "
            f"file's. To keep generation {generation.number}, make it the spec file: {keep}",
        )
    )


def _value(value: object) -> str:
    return "(not set)" if value is None else json.dumps(value) if not isinstance(value, str) else value
