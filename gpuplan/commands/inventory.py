"""``gpuplan inventory [-f SPEC] [--local] [--json]``: the GPUs of every node, or of this host.

Thin: read, build the inventory document (:mod:`gpuplan.planner.observe.inventory`), render it
(:mod:`gpuplan.views.inventory`). Never writes to the cluster or the state, takes no lock.

- Cluster (default): one refresh through the Kubernetes provider (``--kubeconfig`` / ``--context`` from the
  group's :class:`gpuplan.context.Globals` in ``ctx.obj``); nodes come as one paginated list, each page
  reduced before the next is read, so the request count grows only by a page per 500 nodes. ``-f SPEC`` is
  optional and only names the stack and its namespace.
- ``--local``: this host through NVML (:mod:`gpuplan.providers.nvml`); no cluster needed. A host without a
  usable NVIDIA driver gets one ``Error:`` line and exit 1. The environment variable ``GPUPLAN_NVML_FAKE``
  (a JSON host description, :func:`gpuplan.providers.fake_nvml.load_description`) replaces the real NVML: the
  seam the CLI tests use, and a way to rehearse the output on a machine without a GPU.

- ``--prometheus URL`` (or the spec's ``telemetry.prometheus``): the driver of a node GFD has not labelled
  yet, from the DCGM exporter's series in that Prometheus server (two queries, whatever the node count).

Exit codes: 0 when the inventory was read, 1 when it could not be (cluster unreachable, no driver, bad spec,
a Prometheus server unreachable or stale).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuplan.commands.interrupts import READING, nothing_changed
from gpuplan.commands.options import spec_option
from gpuplan.commands.telemetry_source import open_prometheus, prometheus_option
from gpuplan.context import Globals


def local_document() -> dict[str, Any]:
    """This host's inventory document, read through NVML (or the GPUPLAN_NVML_FAKE description)."""
    from gpuplan.planner.observe import inventory
    from gpuplan.providers import nvml

    document: dict[str, Any] = inventory.local_inventory(nvml.read_local_host()).document()
    return document


def cluster_document(
    options: Globals, spec_file: Path | None, prometheus_url: str | None = None
) -> dict[str, Any]:
    """The cluster's inventory document; ``spec_file`` names the stack and namespace (and may name a
    Prometheus server, as ``prometheus_url`` does)."""
    from gpuplan.planner.observe import inventory

    stack: str | None = None
    namespace = "gpu-operator"
    source = None
    pools: list[Any] = []
    if spec_file is not None:
        from gpuplan.planner.spec import model as spec_mod

        spec = spec_mod.load_spec(spec_file)
        stack, namespace = spec.metadata.name, spec.spec.namespace
        source = spec.spec.telemetry.prometheus
        pools = spec.pool_selectors()
    querier = open_prometheus(source, prometheus_url, spec_file)
    with options.reader() as provider:
        document: dict[str, Any] = inventory.read_cluster(
            provider, stack=stack, namespace=namespace, querier=querier, pools=pools
        ).document()
    return document


@click.command(name="inventory")
@spec_option("The stack spec (gpustack.yaml); optional, names the stack and its namespace.", required=False)
@click.option(
    "--local", is_flag=True, help="Read this host's GPUs through NVML instead of the cluster's nodes."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (format_version 1).")
@prometheus_option()
@click.pass_context
def command(
    ctx: click.Context, spec_file: Path | None, local: bool, as_json: bool, prometheus_url: str | None
) -> int:
    """Show the GPUs of every node (model, family, count, memory, compute capability, MIG, driver, and the
    stack components present), or of this host with --local. Read-only."""
    from click.core import ParameterSource

    from gpuplan import errors
    from gpuplan.views import colour
    from gpuplan.views import inventory as view

    options = Globals.of(ctx)
    # a ./gpustack.yaml found without -f only names a cluster's stack: --local ignores it
    if local and ctx.get_parameter_source("spec_file") is ParameterSource.COMMANDLINE:
        raise errors.UsageError(
            "--local reads this host through NVML; -f SPEC applies to the cluster only",
            hint="drop -f SPEC, or drop --local to read the cluster",
        )
    if local and prometheus_url is not None:
        raise errors.UsageError(
            "--local reads this host through NVML; --prometheus applies to the cluster only",
            hint="drop --prometheus, or drop --local to read the cluster",
        )
    with nothing_changed(READING):
        document = local_document() if local else cluster_document(options, spec_file, prometheus_url)
    if as_json:
        click.echo(view.render_json(document), nl=False)
    else:
        palette = colour.for_stream(sys.stdout, allowed=options.color)
        click.echo(view.render(document, palette=palette), nl=False)
    return errors.EXIT_OK
