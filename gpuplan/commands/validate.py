"""``gpuplan validate -f SPEC [--cluster]``: the spec and its compatibility rules, with or without a cluster.

Prints each finding (errors first, then warnings: a version that is not a known release among them) and
``The configuration is valid.`` when nothing blocks; exit 1 on any error finding or spec error (design §4).
With ``--cluster`` (and the group's ``--kubeconfig`` / ``--context``) the rules also run against the nodes'
GPUs, from GFD's labels or, before GFD has run, NFD's NodeFeature
(:func:`gpuplan.planner.observe.cluster_check.check_cluster`): a read-only look, no state, no lock, no write;
a line says how many GPU nodes each source identified. Heavy imports stay inside the command so that
``gpuplan --help`` stays light.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuplan.commands.options import spec_option
from gpuplan.context import Globals

if TYPE_CHECKING:
    from gpuplan.planner.facts import NodeFacts
    from gpuplan.planner.spec.compat import Finding
    from gpuplan.planner.spec.model import Spec


@click.command(name="validate")
@spec_option()
@click.option(
    "--cluster",
    is_flag=True,
    help="Also check the rules against the cluster's nodes' GPUs (read-only: no state, no lock).",
)
@click.pass_context
def command(ctx: click.Context, spec_file: Path, cluster: bool) -> int:
    """Check gpustack.yaml and its compatibility rules (with --cluster, against the nodes' GPUs too)."""
    from gpuplan import errors
    from gpuplan.planner.spec import compat
    from gpuplan.planner.spec import model as spec

    text = spec.read_spec_text(spec_file)
    stack = spec.parse_spec(text, filename=str(spec_file))
    findings = compat.check_spec(stack) + compat.check_releases(stack)
    findings += compat.check_meanings(stack, text, filename=str(spec_file))
    if cluster:
        from gpuplan.planner.observe import cluster_check

        with Globals.of(ctx).reader() as provider:
            checked = cluster_check.check_cluster(provider, stack)
        findings += checked.findings
        click.echo(sources_line(checked.facts))
    ordered = sorted(
        findings, key=lambda f: (f.severity != "error", f.component or "", f.node or "", f.message)
    )
    show(ordered)
    if compat.blocking(findings):
        return errors.EXIT_ERROR
    warnings = len(findings)
    click.echo(
        "The configuration is valid."
        + (f" ({warnings} warning{'s' if warnings != 1 else ''})" if warnings else "")
    )
    return errors.EXIT_OK


def show(findings: Sequence[Finding], *, err: bool = False) -> None:
    """Each finding as ``Error:`` / ``Warning:`` and its hint; errors on stderr, warnings too with ``err``."""
    for finding in findings:
        label = "Error" if finding.severity == "error" else "Warning"
        scope = ": ".join(part for part in (finding.component, _node(finding)) if part)
        to_stderr = err or finding.severity == "error"
        click.echo(f"{label}: {scope + ': ' if scope else ''}{finding.message}", err=to_stderr)
        if finding.hint:
            click.echo(f"  Hint: {finding.hint}", err=to_stderr)


def warn_before_plan(stack: Spec, text: str, filename: str, *, creates_mig_manager: bool) -> None:
    """``validate``'s warnings that a plan's own Findings do not show, on stderr before ``plan`` or ``apply``
    shows anything (a plan's stdout may be one JSON document): a version that is no known release (its pull
    would fail the apply), and a changed meaning of the spec's text where this plan acts on it."""
    from gpuplan.planner.spec import compat

    findings = compat.check_releases(stack)
    if creates_mig_manager:
        findings += compat.check_meanings(stack, text, filename=filename)
    show([finding for finding in findings if finding.severity == "warning"], err=True)


def _node(finding: Finding) -> str | None:
    return f"node {finding.node}" if finding.node else None


def sources_line(facts: Sequence[NodeFacts]) -> str:
    """``Checked 3 GPU nodes: 2 by NFD NodeFeature, 1 by GFD labels; 1 node not identified.``"""
    from gpuplan.views import gpu_sources

    gpu_nodes = [fact for fact in facts if fact.has_nvidia_gpu or fact.unidentified]
    counted = Counter(gpu_sources.source_name(fact.gpu_source) for fact in gpu_nodes if fact.gpu_known)
    unknown = len(gpu_nodes) - sum(counted.values())
    parts = ", ".join(f"{count} by {source}" for source, count in sorted(counted.items()))
    line = f"Checked {len(facts)} node{'s' if len(facts) != 1 else ''}" + (f": {parts}" if parts else "")
    if unknown:
        line += f"; {unknown} node{'s' if unknown != 1 else ''} not identified"
    return line + "."
