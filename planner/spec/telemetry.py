"""The spec's optional ``spec.telemetry`` block: when a GPU reading in the drift report becomes a finding.

``prometheus`` (optional) names a Prometheus server that scrapes the DCGM exporters: the report then asks it
a few PromQL instant queries (:func:`gpuplan.planner.observe.telemetry.query_nodes`) instead of scraping every
node's exporter through the pod proxy. Relative file paths are read from the spec's folder.

Imported by :mod:`gpuplan.planner.spec.model` (so ``gpuplan validate`` checks it and ``gpuplan schema``
documents it) and read by :func:`gpuplan.planner.observe.telemetry.thresholds_for`, which lays ``drift
report``'s CLI flags over it. Since ``drift cronjob`` puts the spec itself into its ConfigMap, the in-cluster
report judges with the same thresholds as a report run by hand. Defaults: 85 °C, any non-zero XID, utilisation
and memory off (a busy GPU is usually a working GPU, so only a team that wants to hear about it sets those).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gpuplan.modules.values import Model

Percent = Annotated[float, Field(gt=0, le=100)]


class PrometheusSettings(Model):
    """A Prometheus server that scrapes the DCGM exporters (``drift report --prometheus URL`` overrides
    ``url``)."""

    url: str
    """Base URL of the server, e.g. http://prometheus.monitoring:9090 (the part before /api/v1)."""
    bearer_token_file: str | None = None
    """A file holding the bearer token sent to the server (e.g. a ServiceAccount token); default none."""
    ca_file: str | None = None
    """A PEM file of the CA that signed an https server's certificate; default the system's CAs."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL, e.g. http://prometheus.monitoring:9090")
        return value


class TelemetrySettings(Model):
    """Thresholds of the drift report's GPU telemetry (read from each node's DCGM exporter)."""

    temperature_celsius: Annotated[float, Field(gt=0, le=200)] = 85.0
    """A GPU at or above this temperature (°C, DCGM_FI_DEV_GPU_TEMP) is a telemetry finding."""
    utilisation_percent: Percent | None = None
    """A GPU at or above this utilisation (%, DCGM_FI_DEV_GPU_UTIL) is a telemetry finding. Default null: off
    (heavy load is then only shown in the nodes table)."""
    xid: bool = True
    """Any non-zero XID error (DCGM_FI_DEV_XID_ERRORS) is a telemetry finding."""
    memory_used_percent: Percent | None = None
    """A GPU whose framebuffer is at least this full (%, DCGM_FI_DEV_FB_USED of FB_USED + FB_FREE) is a
    telemetry finding. Default null: off."""
    prometheus: PrometheusSettings | None = None
    """Read the telemetry from this Prometheus server (PromQL instant queries, a fixed number whatever the
    node count) instead of scraping each node's DCGM exporter. Default null: scrape."""
