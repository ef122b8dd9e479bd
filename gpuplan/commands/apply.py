"""``gpuplan apply -f SPEC [PLANFILE]``: change the cluster as planned, health-gated, rolled back on failure.

Thin. Under the state lock, held for the whole command and released on every exit path
(exceptions, Ctrl-C, SIGTERM): reconcile the journal of an interrupted apply
(:func:`gpuplan.planner.apply.journal.recover`); then, if the interrupted apply left done entries (changes
whose health gates never ran), verify their components' health or roll them back
(:func:`gpuplan.planner.apply.walker.resume_interrupted`: healthy, the journal is cleared and the command goes
on; a failed gate is undone from the entries' before-objects and the command exits 1 naming the component,
pod, node, reason and what was restored); then either plan afresh and show the plan (the same view as
``gpuplan plan``, with its notes on disruptive and not-undoable changes beside each change) and ask for
confirmation, or read PLANFILE and check it (applicable, then fresh: a stale plan names what moved) and print
those notes, since it is not shown, with the GPU pods a driver change evicts now. "No changes" exits 0 at once
(said once: the shown plan ends with it; a saved plan or ``--json`` gets it in the ``summary`` event, and
every apply ends with the summary's resource counts). Confirmation:
``--auto-approve``, else a terminal must answer ``yes``; without a terminal, or with ``--json``, the command
refuses with exit 1 and a hint. The walk (:func:`gpuplan.planner.apply.walker.apply`) reports through
:mod:`gpuplan.views.progress` (``--json``: JSON lines, ending with ``summary``).

Exit codes: 0 applied or nothing to do; 1 failed or refused; 130 interrupted (rolled back like a failure).
A failure's verdict is said once, as the final ``Error:`` line on stderr (:func:`failed_error`: what
failed, with the pod, node and reason, whether it was rolled back and what was undone); the progress
renderers leave it to that line. SIGTERM is turned into the same interruption as Ctrl-C, so both roll back.

Shared with ``gpuplan rollback`` (:mod:`gpuplan.commands.rollback`), which applies through the same engine:
:func:`reconcile_journal`, :func:`options_for` (the writer per worker and the node-by-node driver rollout,
:class:`~gpuplan.planner.driver.step.DriverRollout`), :func:`confirm`, :func:`failed_error`,
:func:`no_changes_summary`, :func:`say` and :func:`sigterm_interrupts`; with ``gpuplan takeover`` also
:func:`resume_interrupted_run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from gpuplan.commands.interrupts import PLANNING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option
from gpuplan.context import Globals, state_backend

if TYPE_CHECKING:
    from gpuplan.errors import ApplyFailedError
    from gpuplan.planner.apply.model import ApplyEvent, ApplyHooks, ApplyOptions, ApplyResult, Failure
    from gpuplan.planner.plan.build import Plan
    from gpuplan.planner.plan.sealed import SavedPlan
    from gpuplan.planner.spec.model import Spec
    from gpuplan.providers.kubernetes_write import KubernetesWriter
    from gpuplan.providers.protocols import MetricsQuerier
    from gpuplan.providers.snapshot import ClusterSnapshot
    from gpuplan.state.backend import StateBackend
    from gpuplan.state.model import StateFile

CONFIRM_HINT = "pass --auto-approve to {verb} without a prompt, or run on a terminal to confirm"
_VERB = {"rollback": "roll back"}  # the verb of a hint, where the command's name is not one
UNDONE_SHOWN = 10  # undone addresses the final error lists before "and N more"
VAGUE_REASONS = frozenset({"ApiError", "StateWriteFailed", "Drift"})
"""Failure reasons that name a category, not what happened: the error line gives the message instead."""


@click.command(name="apply")
@spec_option()
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else gpuplan.state.json beside the spec).",
)
@click.argument("planfile", required=False, type=click.Path(path_type=Path))
@click.option("--auto-approve", is_flag=True, help="Apply without asking for confirmation.")
@click.option(
    "--no-rollback",
    is_flag=True,
    help="On failure leave the changes in place and mark the failed objects tainted.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Stream one JSON event per line (no prompt: needs --auto-approve or a PLANFILE approved with it).",
)
@click.option(
    "--ignore-spec-mismatch",
    is_flag=True,
    help="Apply PLANFILE with the spec it was made from even when -f names another (with a warning).",
)
@click.option(
    "--parallelism",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Components whose changes or health gates run at the same time.",
)
@lock_timeout_option()
@click.pass_context
def command(
    ctx: click.Context,
    spec_file: Path,
    state_path: Path | None,
    planfile: Path | None,
    auto_approve: bool,
    no_rollback: bool,
    as_json: bool,
    ignore_spec_mismatch: bool,
    parallelism: int,
    lock_timeout: float,
) -> int:
    """Apply the changes of a fresh plan (or of PLANFILE), waiting for each component to be healthy."""
    from gpuplan.planner.spec import model as spec_mod

    spec_text = spec_mod.read_spec_text(spec_file)
    spec = spec_mod.parse_spec(spec_text, filename=str(spec_file))
    backend = state_backend(spec_file, state_path)
    try:
        with backend.locked("apply", lock_timeout), Globals.of(ctx).writer() as writer:
            return _apply(
                ctx,
                spec,
                spec_file,
                backend,
                writer,
                spec_text=spec_text,
                planfile=planfile,
                ignore_spec_mismatch=ignore_spec_mismatch,
                auto_approve=auto_approve,
                rollback=not no_rollback,
                as_json=as_json,
                parallelism=parallelism,
            )
    finally:
        backend.close()


def _apply(
    ctx: click.Context,
    spec: Spec,
    spec_file: Path,
    backend: StateBackend,
    writer: KubernetesWriter,
    *,
    planfile: Path | None,
    auto_approve: bool,
    rollback: bool,
    as_json: bool,
    parallelism: int,
    spec_text: str,
    ignore_spec_mismatch: bool = False,
) -> int:
    from gpuplan import errors
    from gpuplan.commands import stack_status, validate
    from gpuplan.commands.plan import render
    from gpuplan.planner.apply.model import Operation
    from gpuplan.planner.apply.walker import apply
    from gpuplan.planner.driver import live_plan
    from gpuplan.planner.observe import refresh
    from gpuplan.planner.plan import planfile as planfile_mod
    from gpuplan.views import colour, plan_refusals, progress

    palette = colour.for_stream(sys.stdout, allowed=Globals.of(ctx).color)
    hooks = progress.for_stream(sys.stdout, as_json=as_json, palette=palette)
    state = reconcile_journal(backend, writer, as_json=as_json)
    resumed = state is not None and bool(state.journal)
    if resumed:
        state = resume_interrupted_run(ctx, spec, backend, writer, hooks)
    with nothing_changed(PLANNING):
        saved = planfile_mod.read_saved(planfile) if planfile is not None else None
        if saved is not None:
            spec = _spec_of_saved(saved, spec, planfile, ignore_spec_mismatch, as_json=as_json)
            plan = saved.plan
            validate.warn_before_plan(
                spec, saved.spec_text, str(spec_file), creates_mig_manager=_creates_mig_manager(plan)
            )
            _check_saved(saved, state, refresh.refresh(writer, spec, state), planfile)
        else:
            # the plan the user confirms is `plan`'s, the GPU pods its driver change evicts included
            plan = live_plan.build(
                spec, state, writer, open_reader=Globals.of(ctx).live_reader, spec_file=str(spec_file)
            )
            validate.warn_before_plan(
                spec, spec_text, str(spec_file), creates_mig_manager=_creates_mig_manager(plan)
            )
            if not as_json:
                render(ctx, plan.document(), as_json=False)
            refused = plan_refusals.refusals(plan.document())
            if refused:  # as `plan` refuses it: one Error: line per broken rule
                raise errors.Refusals(refused)
            planfile_mod.check_applicable(plan)
    if not plan.has_changes and resumed:
        # the interrupted apply made all the spec asks for: the walk of the empty plan keeps it as the
        # generation it was (`gpuplan state history`: resumed), as the apply would have had it not died
        options = dataclasses.replace(
            options_for(ctx, spec=spec, spec_file=spec_file), operation=Operation.RESUME
        )
        result = apply(plan, spec=spec, backend=backend, writer=writer, hooks=hooks, options=options)
        stack_status.after_walk(ctx, spec, result, backend.read())
        if not result.ok:
            raise failed_error(result, rollback=rollback)
        return 0
    if not plan.has_changes:
        # the plan just shown ends with "No changes": the summary then adds only its resource counts
        shown = not as_json and planfile is None
        said = "" if shown else "No changes. The cluster matches the configuration."
        hooks.on_event(no_changes_summary(said))
        stack_status.after_walk(ctx, spec, no_changes_result(state), state)
        return 0
    if planfile is not None and not as_json:
        _saved_plan_notes(plan, writer)
    if planfile is None and not auto_approve:
        confirm("apply", as_json=as_json)
    apply_options = options_for(
        ctx, rollback=rollback, parallelism=parallelism, spec=spec, spec_file=spec_file
    )
    with sigterm_interrupts():
        result = apply(plan, spec=spec, backend=backend, writer=writer, hooks=hooks, options=apply_options)
    stack_status.after_walk(ctx, spec, result, backend.read())
    if not result.ok:
        raise failed_error(result, rollback=rollback)
    return 0


def _creates_mig_manager(plan: Plan) -> bool:
    return any(change.component == "migManager" and change.action == "create" for change in plan.changes)


def _spec_of_saved(
    saved: SavedPlan, spec: Spec, planfile: Path | None, ignore_mismatch: bool, *, as_json: bool
) -> Spec:
    """The spec a saved plan is applied with: its own, which ``-f`` must name (or the user allows another)."""
    from gpuplan.planner.plan import sealed
    from gpuplan.planner.plan.build import spec_digest

    chosen = sealed.check_spec(saved, spec, source=str(planfile), allow_other=ignore_mismatch)
    if spec_digest(spec) != saved.plan.spec_digest:
        say(
            as_json,
            f"Warning: -f names another spec than {planfile} was made from; applying the plan's own spec",
        )
    return chosen


def _check_saved(
    saved: SavedPlan, state: StateFile | None, snapshot: ClusterSnapshot, planfile: Path | None
) -> None:
    """A saved plan applies only as reviewed: applicable, fresh, and its changes what its spec renders. Each
    refusal names the plan file."""
    from gpuplan.planner.plan import planfile as planfile_mod
    from gpuplan.planner.plan import sealed

    planfile_mod.check(saved.plan, state, snapshot, source=str(planfile))
    sealed.check_content(saved, snapshot, source=str(planfile))


def _saved_plan_notes(plan: Plan, writer: KubernetesWriter) -> None:
    """What a saved plan, which is not shown, warns of: its disruptive changes and those that cannot be undone
    in place (a plan shown says each beside its change), and the GPU pods a driver change evicts now."""
    from gpuplan.planner.driver.step import eviction_notes, pods_to_evict
    from gpuplan.views import progress

    notes = progress.undo_notes(plan.document())
    if any(change.disruptive and change.component == "driver" for change in plan.changes):
        notes += eviction_notes(pods_to_evict(writer, plan.changes))
    if notes:
        click.echo("Applying the saved plan; note:\n" + "\n".join(f"  {note}" for note in notes))


def resume_interrupted_run(
    ctx: click.Context, spec: Spec, backend: StateBackend, writer: KubernetesWriter, hooks: ApplyHooks
) -> StateFile | None:
    """The done entries of an interrupted apply verified (the state, journal cleared) or rolled back
    (raises)."""
    from gpuplan.planner.apply.model import ApplyEvent
    from gpuplan.planner.apply.walker import resume_interrupted

    with sigterm_interrupts():
        result = resume_interrupted(
            spec=spec, backend=backend, writer=writer, hooks=hooks, options=options_for(ctx)
        )
    if result is not None and not result.ok:
        # the walker's resume emits no summary of its own: --json still ends with one (plain lines skip it)
        hooks.on_event(
            ApplyEvent(
                "summary",
                result.message,
                state="failed",
                serial=result.serial,
                rolled_back=bool(result.rolled_back),
                counts={"changed": 0, "failed": len(result.failed), "rolled_back": len(result.rolled_back)},
            )
        )
        raise failed_error(result, list_undone=False)  # its message already names what was undone
    return backend.read()


def reconcile_journal(backend: StateBackend, writer: KubernetesWriter, *, as_json: bool) -> StateFile | None:
    """The state, with the journal of an interrupted apply reconciled with the cluster first (and said so)."""
    from gpuplan.planner.apply import journal as apply_journal

    state = backend.read()
    if state is not None and state.pending_journal():
        recovered, notes = apply_journal.recover(state, writer)
        backend.write(recovered.next_serial())
        state = backend.read()
        say(
            as_json,
            "An earlier apply was interrupted; its journal was reconciled with the cluster:\n"
            + "\n".join(f"  {note}" for note in notes),
        )
    return state


def options_for(
    ctx: click.Context,
    *,
    rollback: bool = True,
    parallelism: int = 4,
    spec: Spec | None = None,
    spec_file: Path | None = None,
) -> ApplyOptions:
    """How the commands apply: a writer per worker thread on the global kubeconfig/context (the walker makes
    the node-by-node driver rollout itself, with the plan's resourceVersions for its drift guard), and the
    spec's Prometheus, opened only if the DCGM metrics gate cannot reach the exporters through the API
    server."""
    from gpuplan.commands.telemetry_source import open_prometheus
    from gpuplan.planner.apply.model import ApplyOptions

    settings = spec.spec.telemetry.prometheus if spec is not None else None

    def prometheus() -> MetricsQuerier:
        client = open_prometheus(settings, None, spec_file)
        assert client is not None  # offered only with settings
        return client

    return ApplyOptions(
        rollback=rollback,
        parallelism=parallelism,
        writer_factory=Globals.of(ctx).writer,
        prometheus=prometheus if settings is not None else None,
    )


def say(as_json: bool, text: str) -> None:
    """A line for the user: plain text, or a JSON ``note`` event under ``--json``."""
    import json

    if as_json:
        click.echo(json.dumps({"type": "note", "message": text}))
    else:
        click.echo(text)


def confirm(command: str, *, as_json: bool = False) -> None:
    """Terraform's prompt: only ``yes`` on a terminal goes ahead. No terminal, or ``--json`` (whose stdout is
    JSON lines and shows no plan to confirm), is a refusal that names ``command`` and the way around it."""
    from gpuplan.errors import GpuplanError

    hint = CONFIRM_HINT.format(verb=_VERB.get(command, command))
    if as_json:
        raise GpuplanError(
            f"{command} --json does not ask for confirmation, so it needs --auto-approve", hint=hint
        )
    if not sys.stdin.isatty():
        raise GpuplanError(f"{command} needs confirmation, and stdin is not a terminal", hint=hint)
    click.echo(
        "\nDo you want to perform these actions?\n  gpuplan will perform the actions described above.\n"
        "  Only 'yes' will be accepted to approve.\n"
    )
    answer = click.prompt("  Enter a value", default="", show_default=False)
    if answer.strip() != "yes":
        raise GpuplanError(f"{command} cancelled: the answer was not 'yes'", hint="nothing was changed")


def no_changes_result(state: StateFile | None) -> ApplyResult:
    """The result of a run with nothing to do, for the stack's status."""
    from gpuplan.planner.apply.model import ApplyResult, Outcome

    return ApplyResult(outcome=Outcome.NO_CHANGES, serial=state.serial if state is not None else 0)


def no_changes_summary(message: str) -> ApplyEvent:
    """The ``summary`` event of a run with nothing to do, so ``--json`` always ends with one."""
    from gpuplan.planner.apply.model import ApplyEvent

    return ApplyEvent("summary", message, state="ok", counts={"changed": 0, "failed": 0, "rolled_back": 0})


def failed_error(
    result: ApplyResult, *, rollback: bool = True, list_undone: bool = True, command: str = "apply"
) -> ApplyFailedError:
    """The error a failed walk ends the command with, its one final message. The ``Error:`` line is short:
    what failed (component, gate, reason, pod, node); the detail has the cluster's own words for it, the
    walker's account of the rollback (undone, restored components healthy, or what is left) and the undone
    changes by address; the hint the next step."""
    from gpuplan.errors import ApplyFailedError, ApplyInterruptedError

    summary, detail = _verdict_lines(result)
    undone = result.rolled_back
    if list_undone and undone:
        shown = ", ".join(undone[:UNDONE_SHOWN]) + (
            f" and {len(undone) - UNDONE_SHOWN} more" if len(undone) > UNDONE_SHOWN else ""
        )
        detail.append(f"Undone (each object back as it was before this {command}): {shown}")
    if not result.rollback_complete:
        hint = "run `gpuplan apply` again: it reconciles the journal first"
    elif not rollback:
        hint = "fix the cause and apply again: the next plan replaces the tainted objects"
    else:
        hint = "run `gpuplan plan` to see where things stand"
    # an interrupted walk is undone like a failed one; only its exit code (130) differs
    error = ApplyInterruptedError if result.interrupted else ApplyFailedError
    return error(
        summary, rolled_back=bool(undone) and result.rollback_complete, detail="\n".join(detail), hint=hint
    )


def _verdict_lines(result: ApplyResult) -> tuple[str, list[str]]:
    """The ``Error:`` line (``Apply failed: dcgmExporter at the rollout gate: CrashLoopBackOff (pod p, node
    n)``) and the detail lines (each cause in the cluster's words, then what became of the changes)."""
    from gpuplan.planner.apply.model import after_failure, failed_words

    if not result.failed:  # nothing failed a gate: the verdict is the whole account
        return result.message, []
    causes = result.causes
    headline = "; ".join(dict.fromkeys(_headline(failure) for failure in causes))
    # a failure of no component (an interruption) is its own headline: its description would only repeat it
    evidence = dict.fromkeys(failure.describe() for failure in causes if failure.component)
    return f"{failed_words(result.operation)}: {headline}", [*evidence, after_failure(result)]


def _headline(failure: Failure) -> str:
    """``dcgmExporter at the rollout gate: CrashLoopBackOff (pod p, node n)``; a failure of no component (an
    interruption, an API error) by its own message."""
    if not failure.component:
        message: str = failure.message  # typed for `mypy --strict` on this file alone, where imports are Any
        return message
    where = ", ".join(
        part
        for part in (
            f"pod {failure.pod}" if failure.pod else "",
            f"node {failure.node}" if failure.node else "",
        )
        if part
    )
    gate = f" at the {failure.gate} gate" if failure.gate else ""
    # a pod's waiting reason (CrashLoopBackOff) says it all; a category (ApiError, Drift) does not
    said = failure.reason if failure.reason and failure.reason not in VAGUE_REASONS else failure.message
    return f"{failure.component}{gate}: {said}" + (f" ({where})" if where else "")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so the walker rolls back either way."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
