"""``gpuplan validate -f SPEC``: the spec and its compatibility rules, without a cluster.

Prints each finding (errors first, then warnings: a version that is not a known release among them) and
``The configuration is valid.`` when nothing blocks;
exit 1 on any error finding or spec error (design §4). Heavy imports stay inside the command so that
``gpuplan --help`` stays light.
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuplan.commands.options import spec_option


@click.command(name="validate")
@spec_option()
def command(spec_file: Path) -> int:
    """Check gpustack.yaml and the compatibility rules that need no cluster."""
    from gpuplan import errors
    from gpuplan.planner.spec import compat
    from gpuplan.planner.spec import model as spec

    stack = spec.load_spec(spec_file)
    findings = compat.check_spec(stack) + compat.check_releases(stack)
    ordered = sorted(findings, key=lambda f: (f.severity != "error", f.component or "", f.message))
    for finding in ordered:
        label = "Error" if finding.severity == "error" else "Warning"
        scope = ": ".join(part for part in (finding.component, finding.node) if part)
        click.echo(
            f"{label}: {scope + ': ' if scope else ''}{finding.message}", err=finding.severity == "error"
        )
        if finding.hint:
            click.echo(f"  Hint: {finding.hint}", err=finding.severity == "error")
    if compat.blocking(findings):
        return errors.EXIT_ERROR
    warnings = len(findings)
    click.echo(
        "The configuration is valid."
        + (f" ({warnings} warning{'s' if warnings != 1 else ''})" if warnings else "")
    )
    return errors.EXIT_OK
