"""``gpuplan init --from-cluster``: a starter ``gpustack.yaml`` from the live cluster (design §7.4).

Reads the cluster's shape as ``gpuplan sim snapshot`` does (``planner/observe/shape.py``, GETs only), decides
each component's owner (``planner/observe/starter.py``) and prints the commented spec
(``views/starter_spec.py``), or writes it to ``-o`` (an existing file only with ``--force``; atomically).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from gpuplan import errors
from gpuplan.commands import outfile
from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.context import Globals

WHAT = "spec file"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@click.command(name="init")
@click.option(
    "--from-cluster", is_flag=True, help="Start the spec from the cluster of --kubeconfig/--context."
)
@click.option(
    "--from-clusterpolicy",
    is_flag=True,
    help="The spec equivalent to the GPU Operator's ClusterPolicy (of the cluster, or of --values).",
)
@click.option(
    "--values",
    "values_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --from-clusterpolicy: a values file of the gpu-operator chart (no cluster read).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="The file to write (default: stdout).")
@click.option("--force", is_flag=True, help="Replace the -o file if it exists.")
@click.option("--name", default="gpustack", show_default=True, help="metadata.name of the stack.")
@click.pass_context
def command(
    ctx: click.Context,
    from_cluster: bool,
    from_clusterpolicy: bool,
    values_file: Path | None,
    output: Path | None,
    force: bool,
    name: str,
) -> int:
    """Write a starter gpustack.yaml from what the cluster runs, with comments on every choice."""
    if from_cluster == from_clusterpolicy:
        raise errors.UsageError(
            "say where the spec starts from: --from-cluster or --from-clusterpolicy",
            hint="gpuplan init --from-cluster -o gpustack.yaml",
        )
    if values_file is not None and not from_clusterpolicy:
        raise errors.UsageError(
            "--values goes with --from-clusterpolicy",
            hint="gpuplan init --from-clusterpolicy --values values.yaml",
        )
    if not NAME.match(name):
        raise errors.UsageError(
            f"--name {name!r} is not a DNS label", hint="lower-case letters, digits and '-', e.g. --name lab"
        )
    if from_clusterpolicy:
        return _from_clusterpolicy(ctx, values_file, output, force=force, name=name)
    from gpuplan.planner.observe import shape, starter
    from gpuplan.views import starter_spec

    outfile.check_writable(output, force=force, what=WHAT)
    options = Globals.of(ctx)
    with nothing_changed(READING), options.reader() as provider:
        found = shape.read_shape(provider)
    spec_file = output.name if output is not None else "gpustack.yaml"
    facts = starter.build(found, name=name, spec_file=spec_file)
    source = f"context {options.context}" if options.context else "the current cluster"
    outfile.emit(output, starter_spec.render(facts, source=source), what=WHAT)
    if output is not None:
        click.echo(f"Wrote {output}; check it with: gpuplan validate -f {output}", err=True)
    return errors.EXIT_OK


def _from_clusterpolicy(
    ctx: click.Context, values_file: Path | None, output: Path | None, *, force: bool, name: str
) -> int:
    from gpuplan.commands import init_policy
    from gpuplan.views import policy_spec

    outfile.check_writable(output, force=force, what=WHAT)
    if values_file is not None:
        translation, source = init_policy.from_values(values_file, name=name)
    else:
        translation, source = init_policy.from_cluster(ctx, name=name)
    outfile.emit(output, policy_spec.render(translation, source=source), what=WHAT)
    init_policy.summarise(translation, output)
    if output is not None:
        click.echo(f"Wrote {output}; check it with: gpuplan validate -f {output}", err=True)
    return errors.EXIT_OK
