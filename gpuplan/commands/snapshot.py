"""``gpuplan sim snapshot``: the current cluster's shape as a scenario file (design §6, §7.4).

Read-only: the cluster is read through the provider's paginated lists (``planner/observe/shape.py``) and
rendered by ``views/scenario_file.py``; ``gpuplan sim start --scenario FILE`` starts an equivalent simulated
cluster from it. Registered under the ``sim`` group by ``gpuplan/commands/sim.py``.
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuplan import errors
from gpuplan.commands import outfile
from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.context import Globals

WHAT = "scenario file"


@click.command("snapshot", short_help="Write the current cluster's shape as a scenario file.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=True, path_type=Path),
    help="The file to write (default: stdout).",
)
@click.option("--force", is_flag=True, help="Replace the -o file if it exists.")
@click.pass_context
def command(ctx: click.Context, output: Path | None, force: bool) -> int:
    """Write the cluster of --kubeconfig / --context as a scenario for `gpuplan sim start --scenario`."""
    from gpuplan.planner.observe import shape
    from gpuplan.views import scenario_file

    outfile.check_writable(output, force=force, what=WHAT)
    with nothing_changed(READING), Globals.of(ctx).reader() as provider:
        found = shape.read_shape(provider)
    outfile.emit(output, scenario_file.render(found), what=WHAT)
    if output is not None:
        click.echo(
            f"Wrote {output}: {found.node_count} nodes in {len(found.groups)} entries, "
            f"{len(found.objects)} objects.",
            err=True,
        )
    return errors.EXIT_OK
