"""Where ``drift report`` and ``inventory`` read the GPUs' telemetry: ``--prometheus URL`` or the spec's
``telemetry.prometheus`` block names a Prometheus server (:class:`gpuplan.providers.prometheus.
PrometheusClient`); without either, the exporters are scraped through the pod proxy as before.

The flag's URL replaces the spec's ``url`` and keeps its ``bearerTokenFile`` and ``caFile``; relative paths
in the spec are read from the spec's folder, as a user reading the file would expect.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from gpuplan.planner.spec.telemetry import PrometheusSettings
    from gpuplan.providers.prometheus import PrometheusClient

F = TypeVar("F", bound=Callable[..., object])


def prometheus_option() -> Callable[[F], F]:
    """``--prometheus URL``, passed as ``prometheus_url``."""
    return click.option(
        "--prometheus",
        "prometheus_url",
        metavar="URL",
        default=None,
        help="Read the GPUs' telemetry from this Prometheus server (PromQL instant queries, a fixed number "
        "whatever the node count) instead of scraping each DCGM exporter "
        "[default: the spec's telemetry.prometheus.url, else scrape].",
    )


def open_prometheus(
    settings: PrometheusSettings | None, url: str | None, spec_file: Path | None
) -> PrometheusClient | None:
    """The client the flag and the spec name, or None (scrape the exporters)."""
    from gpuplan.providers.prometheus import PrometheusClient

    if url is None and settings is None:
        return None
    folder = spec_file.parent if spec_file is not None else Path(".")

    def beside_spec(path: str | None) -> Path | None:
        return None if path is None else folder / Path(path).expanduser()

    return PrometheusClient(
        url if url is not None else settings.url if settings is not None else "",
        bearer_token_file=beside_spec(settings.bearer_token_file if settings else None),
        ca_file=beside_spec(settings.ca_file if settings else None),
    )
