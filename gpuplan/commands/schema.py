"""``gpuplan schema``: the JSON Schema (draft 2020-12) of gpustack.yaml, for editors and CI checks."""

from __future__ import annotations

import click


@click.command(name="schema")
def command() -> int:
    """Print the JSON Schema of gpustack.yaml."""
    from gpuplan.planner.spec import model as spec

    click.echo(spec.json_schema_text(), nl=False)
    return 0
