"""``gpuplan drift report`` (for cron) and ``gpuplan drift cronjob`` (the same report as a Kubernetes
CronJob).

``report`` is read-only on the stack by construction: it reads the state without taking the lock (a running
apply is never blocked, and the state is never written), reads the cluster with GETs only (one refresh: lists
with label selectors and pagination; the stack's pods as ONE paginated list reduced page by page with
:func:`gpuplan.planner.drift.pods.pod_facts`; one DCGM scrape per node through the pod proxy, bounded in
concurrency and capped by ``--telemetry-max-nodes``; or, with ``--prometheus URL`` or the spec's
``telemetry.prometheus``, a few PromQL queries to that server instead), builds
:func:`gpuplan.planner.drift.report.build_report` and renders it. Exit codes for cron: 0 no drift, 2 drift
found, 1 could not check (spec invalid, state missing or unreadable, cluster unreachable, the Prometheus
server unreachable or stale, or no DCGM exporter could be scraped and nothing else drifted), with one
``Error:`` line; never 0 when something could not be read. Scrapes that fail transiently after retries are
notes ("not scraped: ..."), not drift: 2/0 then judge what was read (:meth:`Report.exit_code`). ``--output
FILE`` writes atomically (temp file in the same folder, fsync, rename), so a node exporter textfile collector
never reads half a file. Its one write to the cluster is the stack's GPUStack status
(:mod:`gpuplan.commands.stack_status`; a Warning: when it may not, ``--no-status``: none). ``--remediate``
applies the reverse of the drift on gpuplan's objects (:mod:`gpuplan.commands.remediate`, with its own exit
codes: 0 none left, 2 drift remains, 1 failed or refused).

``cronjob`` prints the YAML of a ServiceAccount that reads the stack (and the state's Secrets, for a
``kubernetes://`` state) and may write only its GPUStack's status, a ConfigMap with the spec and a CronJob
running ``report`` (:mod:`gpuplan.views.drift_cronjob`); docs/drift.md explains where the state comes from.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuplan.commands.group import SuggestingGroup
from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.commands.options import lock_timeout_option, spec_option
from gpuplan.commands.telemetry_source import prometheus_option
from gpuplan.context import Globals

if TYPE_CHECKING:
    from gpuplan.errors import GpuplanError
    from gpuplan.planner.drift.report import Report
    from gpuplan.planner.spec.model import Spec
    from gpuplan.state.model import StateFile

FORMATS = ("text", "json", "markdown", "prometheus", "html")
DEFAULT_MAX_NODES = 1000


@click.group(name="drift", cls=SuggestingGroup)
def command() -> None:
    """Drift checks: what changed outside gpuplan, what runs unowned, how each node's stack looks."""


@command.command(name="report")
@spec_option()
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="State file or kubernetes://NS/NAME (default: spec.state, else beside the spec). Read unlocked.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text, json (design §4.1), markdown, prometheus (textfile collector) or html (one page).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    help="Write the report to FILE atomically instead of standard output.",
)
@click.option("--no-telemetry", is_flag=True, help="Do not scrape the DCGM exporters (no per-node requests).")
@prometheus_option()
@click.option(
    "--telemetry-max-nodes",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_NODES,
    show_default=True,
    help="Scrape at most this many nodes (by name); the report says when it was capped.",
)
@click.option(
    "--telemetry-concurrency",
    type=click.IntRange(min=1, max=64),
    default=8,
    show_default=True,
    help="Scrapes in flight at once.",
)
@click.option(
    "--temperature-threshold",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="A GPU at or above this temperature (°C) is a telemetry finding "
    "[default: the spec's telemetry.temperatureCelsius, 85].",
)
@click.option(
    "--utilisation-threshold",
    type=click.FloatRange(min=0, max=100, min_open=True),
    default=None,
    help="A GPU at or above this utilisation (%) is a telemetry finding "
    "[default: the spec's telemetry.utilisationPercent, off].",
)
@click.option(
    "--memory-used-threshold",
    type=click.FloatRange(min=0, max=100, min_open=True),
    default=None,
    help="A GPU with at least this share of its memory in use (%) is a telemetry finding "
    "[default: the spec's telemetry.memoryUsedPercent, off].",
)
@click.option(
    "--xid/--no-xid",
    "report_xid",
    default=None,
    help="Whether a non-zero XID error is a telemetry finding [default: the spec's telemetry.xid, on].",
)
@click.option(
    "--heavy-load-threshold",
    type=float,
    default=90.0,
    show_default=True,
    help="A GPU at or above this utilisation (%) is shown as under heavy load (not drift).",
)
@click.option(
    "--no-status",
    is_flag=True,
    help="Do not write the findings to the stack's GPUStack status (the report's only write).",
)
@click.option(
    "--remediate",
    is_flag=True,
    help="Apply the reverse of the drift found on gpuplan's objects (plan, lock, gates, rollback as apply), "
    "logged to ConfigMap gpuplan-plan-log-<stack>.",
)
@click.option(
    "--allow-disruptive",
    is_flag=True,
    help="With --remediate: allow a driver change that restarts driver pods (and evicts GPU pods).",
)
@lock_timeout_option()
@click.pass_context
def report(
    ctx: click.Context,
    spec_file: Path,
    state_path: Path | None,
    output_format: str,
    output: Path | None,
    no_telemetry: bool,
    prometheus_url: str | None,
    telemetry_max_nodes: int,
    telemetry_concurrency: int,
    temperature_threshold: float | None,
    utilisation_threshold: float | None,
    memory_used_threshold: float | None,
    report_xid: bool | None,
    heavy_load_threshold: float,
    no_status: bool,
    remediate: bool,
    allow_disruptive: bool,
    lock_timeout: float,
) -> int:
    """Report drift and per-node stack health. Exit 0 no drift, 2 drift, 1 could not check. Read-only on the
    stack: its one write is the GPUStack status (--no-status: none), unless --remediate."""
    from gpuplan import errors
    from gpuplan.planner.observe import telemetry
    from gpuplan.planner.spec import model as spec_mod

    if allow_disruptive and not remediate:
        raise click.UsageError("--allow-disruptive only applies with --remediate")
    spec = spec_mod.load_spec(spec_file)
    state = read_state(spec_file, state_path)
    thresholds = telemetry.thresholds_for(
        spec.spec.telemetry,
        temperature_c=temperature_threshold,
        utilisation_percent=utilisation_threshold,
        report_xid=report_xid,
        memory_used_percent=memory_used_threshold,
        heavy_load_percent=heavy_load_threshold,
    )
    options = Globals.of(ctx)

    def checked(state: StateFile) -> Report:
        with nothing_changed(READING):
            return check(
                options,
                spec,
                state,
                spec_file=str(spec_file),
                thresholds=thresholds,
                max_nodes=None if no_telemetry else telemetry_max_nodes,
                concurrency=telemetry_concurrency,
                prometheus_url=prometheus_url,
            )

    result = checked(state)
    document = result.document()
    text = rendered(document, output_format, color=options.color and output is None)
    if output is not None:
        write_atomically(output, text)
    else:
        for piece in text:
            click.echo(piece, nl=False)
    code: int = result.exit_code()
    if remediate and result.drift:
        from gpuplan.commands import remediate as remediation

        return remediation.remediate(
            ctx,
            spec,
            spec_file,
            state_path,
            result,
            allow_disruptive=allow_disruptive,
            write_status=not no_status,
            lock_timeout=lock_timeout,
            recheck=lambda: checked(read_state(spec_file, state_path)),
        )
    if not no_status:
        from gpuplan.commands import stack_status

        stack_status.after_report(ctx, spec, document)
    if code == errors.EXIT_ERROR:  # the report (with its notes) is out; cron still needs its one Error: line
        click.echo(
            errors.GpuplanError(
                "could not check the GPUs' telemetry: no DCGM exporter could be scraped",
                detail=result.notes[-1],
                hint="run the report again later",
            ).render(),
            err=True,
        )
    return code


def read_state(spec_file: Path, state_path: Path | None) -> StateFile:
    """The state, read without the lock; a missing state is an error (nothing to compare with)."""
    from gpuplan import errors
    from gpuplan.context import state_backend

    backend = state_backend(spec_file, state_path)
    state = backend.read()
    if state is None:
        raise errors.StateError(
            "no state to compare with",
            where=backend.where,
            hint="run `gpuplan apply` first, or pass the state file with --state",
        )
    return state


def check(
    options: Globals,
    spec: Spec,
    state: StateFile,
    *,
    spec_file: str,
    thresholds: Any,
    max_nodes: int | None,
    concurrency: int,
    prometheus_url: str | None = None,
) -> Report:
    """The report, in one engine call (:func:`gpuplan.planner.drift.live.check`) on the global cluster;
    the telemetry from the Prometheus server the flag or the spec names, when one does."""
    from gpuplan.commands.telemetry_source import open_prometheus
    from gpuplan.planner.drift import live

    querier = None
    if max_nodes is not None:
        querier = open_prometheus(spec.spec.telemetry.prometheus, prometheus_url, Path(spec_file))
    with options.reader() as provider:
        return live.check(
            spec,
            state,
            provider,
            open_reader=options.live_reader,
            spec_file=spec_file,
            thresholds=thresholds,
            max_nodes=max_nodes,
            concurrency=concurrency,
            querier=querier,
        )


def render(document: dict[str, Any], output_format: str, *, color: bool) -> str:
    from gpuplan.views import colour, drift_html, drift_json, drift_markdown, drift_prometheus, drift_text

    if output_format == "json":
        return drift_json.render(document)
    if output_format == "markdown":
        return drift_markdown.render(document)
    if output_format == "prometheus":
        return drift_prometheus.render(document)
    if output_format == "html":
        return drift_html.render(document)
    return drift_text.render(document, palette=colour.for_stream(sys.stdout, allowed=color))


def rendered(document: dict[str, Any], output_format: str, *, color: bool) -> Iterator[str]:
    """:func:`render`'s text, JSON's in pieces as it is encoded (a fleet's report is never one string)."""
    from gpuplan.views import drift_json

    if output_format == "json":
        return drift_json.pieces(document)
    return iter([render(document, output_format, color=color)])


def write_atomically(path: Path, text: Iterable[str]) -> None:
    """``text`` (its pieces, written as they come) replaces ``path`` whole
    (:func:`gpuplan.state.files.write_atomically`), mode 0644.

    Any OS error (a missing folder, no permission, a full disk, during any step) is one ``Error:`` line
    naming the file, with a hint by errno; the temp file is removed and the old file is left as it was."""
    from gpuplan.state import files

    try:
        pieces = (piece.encode("utf-8") for piece in text)
        files.write_atomically(path, pieces, mode=0o644)  # read by a textfile collector: another user
    except OSError as exc:
        raise _write_error(path, exc) from None


_WRITE_HINTS = {
    errno.ENOENT: "the folder does not exist: create it, or pass --output a path in an existing folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder: pass --output a path in an existing folder",
    errno.EACCES: "the user running gpuplan may not write there: check the folder's owner and mode",
    errno.EPERM: "the user running gpuplan may not write there: check the folder's owner and mode",
    errno.EROFS: "the file system is read-only: write the report elsewhere",
    errno.ENOSPC: "the disk is full: free space, or write the report elsewhere; the old report was kept",
    errno.EDQUOT: "the disk quota is exceeded: free space, or write the report elsewhere; the old report was "
    "kept",
    errno.EISDIR: "the path is a folder: pass --output a file name",
}


def _write_error(path: Path, exc: OSError) -> GpuplanError:
    from gpuplan import errors

    hint = _WRITE_HINTS.get(exc.errno or 0, "check the path given to --output and the space left there")
    return errors.GpuplanError(f"cannot write the report: {exc.strerror or exc}", where=str(path), hint=hint)


@command.command(name="cronjob", short_help="Print a read-only CronJob that runs the report.")
@click.option(
    "-f",
    "--file",
    "spec_file",
    required=True,
    type=click.Path(path_type=Path),
    help="The stack spec (put into a ConfigMap).",
)
@click.option("--schedule", default="*/30 * * * *", show_default=True, help="Cron schedule of the report.")
@click.option("--namespace", help="Namespace of the CronJob and its objects (default: the spec's namespace).")
@click.option(
    "--image",
    help="Image with gpuplan installed (default: the tag deploy/Dockerfile's docs build, gpuplan:<version>).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="json",
    show_default=True,
    help="Report format the job prints to its log.",
)
@click.option(
    "--state-secret",
    default="gpuplan-state",
    show_default=True,
    help="For a state file: the Secret it is copied into (kubectl create secret generic ... --from-file).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="kubernetes://NS/NAME: the job reads that state from the cluster (default: spec.state); a file: "
    "copied into --state-secret.",
)
@click.option(
    "--state-parts",
    type=click.IntRange(0, 64),
    default=8,
    show_default=True,
    help="Part Secrets of a kubernetes:// state the job may read (the state grows into more).",
)
def cronjob(
    spec_file: Path,
    schedule: str,
    namespace: str | None,
    image: str | None,
    output_format: str,
    state_secret: str,
    state_path: Path | None,
    state_parts: int,
) -> int:
    """Print a read-only CronJob (ServiceAccount, RBAC, ConfigMap, CronJob) running `drift report`."""
    from gpuplan.context import state_location
    from gpuplan.planner.observe import refresh
    from gpuplan.planner.spec import model as spec_mod
    from gpuplan.state.location import KubernetesLocation, describe
    from gpuplan.state.model import gpuplan_version
    from gpuplan.views import drift_cronjob

    spec = spec_mod.load_spec(spec_file)
    location = state_location(spec_file, state_path)
    if isinstance(location, KubernetesLocation) and _given(click.get_current_context(), "state_secret"):
        raise click.UsageError(f"--state-secret is for a state file; {describe(location)} is read in place")
    options = drift_cronjob.Options(
        namespace=namespace or spec.spec.namespace,
        schedule=schedule,
        image=image or f"{drift_cronjob.IMAGE_NAME}:{gpuplan_version()}",
        stack=spec.metadata.name,
        output_format=output_format,
        state_secret=state_secret,
        state=location if isinstance(location, KubernetesLocation) else None,
        state_parts=state_parts,
    )
    click.echo(
        drift_cronjob.render(
            spec_file.read_text(encoding="utf-8"), refresh.manageable_kinds(spec, None), options
        ),
        nl=False,
    )
    return 0


def _given(ctx: click.Context, name: str) -> bool:
    """Whether the user passed the option ``name`` (not its default)."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
