"""``gpuplan graph -f SPEC [--format text|dot|mermaid]``: the components, their owners and dependencies."""

from __future__ import annotations

from pathlib import Path

import click

from gpuplan.commands.options import spec_option


@click.command(name="graph")
@spec_option()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "dot", "mermaid"]),
    default="text",
    show_default=True,
    help="text for reading, dot for Graphviz, mermaid for Markdown.",
)
def command(spec_file: Path, output_format: str) -> int:
    """Print the dependency graph of the stack's components with each component's owner."""
    from gpuplan.planner import graph
    from gpuplan.planner.spec import model as spec

    built = graph.build(spec.load_spec(spec_file))
    render = {"text": built.to_text, "dot": built.to_dot, "mermaid": built.to_mermaid}[output_format]
    click.echo(render(), nl=False)
    return 0
