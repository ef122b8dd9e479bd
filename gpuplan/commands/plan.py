"""``gpuplan plan -f SPEC``: refresh the cluster, compare, and show (or save) what apply would do.

Thin: load the spec, check ``--target`` before any cluster access, take the state lock for the read (released
on every path), make the plan with one engine call (:func:`gpuplan.planner.driver.live_plan.build`: refresh,
the driver versions GFD has not labelled, the plan, the GPU pods a driver change evicts) through the clients
of the group's :class:`gpuplan.context.Globals` (``--kubeconfig`` / ``--context``), write it with ``--out``,
render it. The exit code comes from the same document the views render: 0 no changes, 2 changes (or drift in
a refresh-only plan) with ``--detailed-exitcode``, 1 on any error (one ``Error:`` line, nothing written).
A plan with compatibility errors (what the stack cannot become healthy with) is rendered, then refused:
one ``Error:`` line per rule it breaks, exit 1, nothing saved. The cluster is never changed.

:func:`render` is shared with ``show``, ``apply`` and ``rollback``.

Views and the engine are imported inside the functions, so ``gpuplan plan --help`` stays light.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuplan.commands.interrupts import PLANNING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option
from gpuplan.context import Globals, state_backend


def render(ctx: click.Context, document: dict[str, Any], *, as_json: bool) -> None:
    from gpuplan.views import colour, plan_human, plan_json

    if as_json:
        click.echo(plan_json.render(document), nl=False)
    else:
        palette = colour.for_stream(sys.stdout, allowed=Globals.of(ctx).color)
        click.echo(plan_human.render(document, palette=palette), nl=False)


def exit_code(document: dict[str, Any], *, detailed: bool) -> int:
    from gpuplan.views import plan_json

    return plan_json.exit_code(document, detailed=detailed)


@click.command(name="plan")
@spec_option()
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else gpuplan.state.json beside the spec).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    help="Save the plan to this file (mode 0600) for `gpuplan apply` and `gpuplan show`.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON document.")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="Exit 2 when there are changes (or, with --refresh-only, drift), 0 when there are none.",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="COMPONENT",
    help="Plan only this component and what it depends on (repeatable); the plan is incomplete.",
)
@click.option("--refresh-only", is_flag=True, help="Show only what changed outside gpuplan; no actions.")
@click.option("--destroy", is_flag=True, help="Plan the removal of every object of the stack.")
@lock_timeout_option()
@click.pass_context
def command(
    ctx: click.Context,
    spec_file: Path,
    state_path: Path | None,
    out: Path | None,
    as_json: bool,
    detailed_exitcode: bool,
    targets: tuple[str, ...],
    refresh_only: bool,
    destroy: bool,
    lock_timeout: float,
) -> int:
    """Show what apply would change in the cluster, and why. Never changes the cluster."""
    from gpuplan import errors
    from gpuplan.commands import validate
    from gpuplan.planner import graph
    from gpuplan.planner.driver import live_plan
    from gpuplan.planner.plan import planfile
    from gpuplan.planner.spec import model as spec_mod
    from gpuplan.views import plan_refusals

    if refresh_only and destroy:
        raise errors.UsageError(
            "--refresh-only and --destroy cannot be combined",
            hint="a refresh-only plan takes no actions; a destroy plan removes everything",
        )
    spec_text = spec_mod.read_spec_text(spec_file)
    spec = spec_mod.parse_spec(spec_text, filename=str(spec_file))
    dependencies = graph.build(spec)
    if targets:
        dependencies.with_dependencies(targets)  # an unknown target fails before any cluster access
    options = Globals.of(ctx)
    backend = state_backend(spec_file, state_path)
    with nothing_changed(PLANNING), backend.locked("plan", lock_timeout):
        state = backend.read()
        with options.reader() as provider:
            result = live_plan.build(
                spec,
                state,
                provider,
                open_reader=options.live_reader,
                dependency_graph=dependencies,
                targets=targets,
                refresh_only=refresh_only,
                destroy=destroy,
                spec_file=str(spec_file),
            )
    document = result.document()
    if not (refresh_only or destroy):
        creates = any(c["component"] == "migManager" and c["action"] == "create" for c in document["changes"])
        validate.warn_before_plan(spec, spec_text, str(spec_file), creates_mig_manager=creates)
    refused = [] if refresh_only else plan_refusals.refusals(document)
    if out is not None and not refused:
        planfile.write(out, result, spec_text=spec_text)
    render(ctx, document, as_json=as_json)
    if refused:  # shown whole above (--json: the document), then refused: never saved, never applied
        raise errors.Refusals(refused)
    if state is not None and state.journal:  # stderr: --json output stays one document
        click.echo("\nthe last apply was interrupted; `gpuplan apply` will verify or roll it back", err=True)
    if out is not None and not as_json:
        click.echo(
            f"\nSaved the plan to {out}. To apply exactly this plan: gpuplan apply -f {spec_file} {out}"
        )
    return exit_code(document, detailed=detailed_exitcode)
