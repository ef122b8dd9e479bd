"""``gpuplan show PLANFILE [--json]``: render a saved plan, without a cluster or a state.

The same views as ``gpuplan plan`` over the saved document; a missing or malformed file is one ``Error:``
line and exit 1.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="show")
@click.argument("planfile", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the saved plan as its JSON document.")
@click.pass_context
def command(ctx: click.Context, planfile: Path, as_json: bool) -> int:
    """Show a plan saved with `gpuplan plan --out PLANFILE`."""
    from gpuplan.commands.plan import render
    from gpuplan.planner.plan import planfile as planfile_mod

    render(ctx, planfile_mod.read(planfile).document(), as_json=as_json)
    return 0
