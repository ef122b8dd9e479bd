"""``gpuplan plan -f SPEC``: refresh the cluster, compare, and show (or save) what apply would do.

Thin: load the spec, take the state lock for the read (released on every path), refresh through
the Kubernetes provider (``--kubeconfig`` / ``--context`` from the group's :class:`gpuplan.context.Globals`),
read
the driver versions GFD has not labelled yet (DCGM exporter scrapes, capped, and NVML when gpuplan runs on a
node:
:mod:`gpuplan.planner.observe.driver_versions`), make the plan, add the GPU pods a driver change evicts on the
first nodes the
rollout takes (:func:`gpuplan.planner.driver.evictions.with_gpu_pods`, a capped number of pod lists), write it
with
``--out``, render it. The exit code comes from the same document the views render: 0 no changes, 2 changes
(or drift in a refresh-only plan) with ``--detailed-exitcode``, 1 on any error (one ``Error:`` line, nothing
written). The cluster is never changed.

:func:`globals_of` and :func:`render` are shared with ``show`` and ``import``.

Views and the engine are imported inside the functions, so ``gpuplan plan --help`` stays light.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuplan.context import Globals

if TYPE_CHECKING:
    from gpuplan.planner.observe.driver_versions import DriverReports
    from gpuplan.planner.plan.build import Plan
    from gpuplan.planner.spec.model import Spec
    from gpuplan.providers.kubernetes import KubernetesProvider
    from gpuplan.providers.kubernetes_live import LiveReader
    from gpuplan.providers.snapshot import ClusterSnapshot


def globals_of(ctx: click.Context) -> Globals:
    """The group's global options; defaults when the command runs without the group."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Globals) else Globals(kubeconfig=None, context=None, color=True)


def provider_for(ctx: click.Context) -> KubernetesProvider:
    from gpuplan.providers.kubernetes import KubernetesProvider

    options = globals_of(ctx)
    return KubernetesProvider(kubeconfig=options.kubeconfig, context=options.context)


def _proxy_reader_for(ctx: click.Context) -> Callable[[], LiveReader]:
    """Opens a reader per scrape thread (a provider is not thread-safe), on the same cluster and context."""
    from gpuplan.providers.kubernetes_live import LiveReader

    options = globals_of(ctx)
    return lambda: LiveReader(kubeconfig=options.kubeconfig, context=options.context)


def driver_reports(
    ctx: click.Context, reader: KubernetesProvider, snapshot: ClusterSnapshot, spec: Spec
) -> DriverReports:
    """The driver versions GFD has not labelled yet (DCGM exporters, NVML here), for the plan's driver
    status."""
    from gpuplan.planner.observe import driver_versions as host_driver

    return host_driver.gather(reader, snapshot, spec, open_reader=_proxy_reader_for(ctx))


def with_gpu_pods(ctx: click.Context, plan: Plan, snapshot: ClusterSnapshot) -> Plan:
    """``plan`` naming the GPU pods its disruptive driver changes evict (a capped read; see
    planner.driver.evictions),
    so every plan a user reviews — ``plan``'s, and the one ``apply`` / ``rollback`` show before they ask —
    does."""
    from gpuplan.planner.driver import evictions

    if not evictions.needs_reads(plan):
        return plan
    with contextlib.closing(_proxy_reader_for(ctx)()) as reader:
        return evictions.with_gpu_pods(plan, reader, snapshot.nodes)


def render(ctx: click.Context, document: dict[str, Any], *, as_json: bool) -> None:
    from gpuplan.views import colour, plan_human, plan_json

    if as_json:
        click.echo(plan_json.render(document), nl=False)
    else:
        palette = colour.for_stream(sys.stdout, allowed=globals_of(ctx).color)
        click.echo(plan_human.render(document, palette=palette), nl=False)


def exit_code(document: dict[str, Any], *, detailed: bool) -> int:
    from gpuplan.views import plan_json

    return plan_json.exit_code(document, detailed=detailed)


@click.command(name="plan")
@click.option(
    "-f",
    "--file",
    "spec_file",
    required=True,
    type=click.Path(path_type=Path),
    help="The stack spec (gpustack.yaml).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file (default: gpuplan.state.json beside the spec).",
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
) -> int:
    """Show what apply would change in the cluster, and why. Never changes the cluster."""
    from gpuplan import errors
    from gpuplan.planner import graph
    from gpuplan.planner.observe import refresh
    from gpuplan.planner.plan import build as plan_mod
    from gpuplan.planner.plan import planfile
    from gpuplan.planner.spec import model as spec_mod
    from gpuplan.state.local import LocalFileBackend, resolve_state_path

    if refresh_only and destroy:
        raise errors.UsageError(
            "--refresh-only and --destroy cannot be combined",
            hint="a refresh-only plan takes no actions; a destroy plan removes everything",
        )
    spec_text = spec_mod.read_spec_text(spec_file)
    spec = spec_mod.parse_spec(spec_text, filename=str(spec_file))
    if targets:
        graph.build(spec).with_dependencies(targets)  # an unknown target fails before any cluster access
    backend = LocalFileBackend(resolve_state_path(state_path, spec_file))
    with backend.locked("plan"):
        state = backend.read()
        with provider_for(ctx) as provider:
            snapshot = refresh.refresh(provider, spec, state)
            reports = None if destroy else driver_reports(ctx, provider, snapshot, spec)
    result = plan_mod.make_plan(
        spec,
        state,
        snapshot,
        targets=targets,
        refresh_only=refresh_only,
        destroy=destroy,
        spec_file=str(spec_file),
        driver_reports=reports,
    )
    result = with_gpu_pods(ctx, result, snapshot)
    if out is not None:
        planfile.write(out, result, spec_text=spec_text)
    document = result.document()
    render(ctx, document, as_json=as_json)
    if state is not None and state.journal:  # stderr: --json output stays one document
        click.echo("\nthe last apply was interrupted; `gpuplan apply` will verify or roll it back", err=True)
    if out is not None and not as_json:
        click.echo(
            f"\nSaved the plan to {out}. To apply exactly this plan: gpuplan apply -f {spec_file} {out}"
        )
    return exit_code(document, detailed=detailed_exitcode)
