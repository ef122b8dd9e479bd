"""``drift report --format prometheus``: the node exporter textfile collector format, via prometheus_client.

Called by :mod:`gpuplan.commands.drift`. The families are built with ``prometheus_client``'s metric families
in a registry of their own and written with ``generate_latest``, so the text is exactly what Prometheus
parses (a test reads it back with ``prometheus_client.parser``):

- ``gpuplan_drift_detected`` 1/0, ``gpuplan_drift_findings{kind}`` for every kind (0 included, so an alert can
  compare), ``gpuplan_drift_ignored{kind}`` (what ``spec.ignore`` declares, the same kinds),
  ``gpuplan_last_check_timestamp_seconds``;
- ``gpuplan_coverage_ratio``, ``gpuplan_managed_objects``, ``gpuplan_unmanaged_objects``;
- ``gpuplan_component_healthy{node,component}`` 1 ok or drifted (running, though not as applied: the
  findings say so) / 0 missing or unhealthy (n/a cells are left out);
- ``gpuplan_telemetry_not_scraped_nodes``: nodes whose scrape failed past the retries (a note, not drift);
- ``gpuplan_nodes``, ``gpuplan_gpu_nodes``, ``gpuplan_gpu_temperature_celsius{node,gpu,uuid}`` and
  ``gpuplan_gpu_xid_last{node,gpu,uuid}`` where telemetry was read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

RUNNING = frozenset({"ok", "drifted"})  # gpuplan.planner.drift.nodes.RUNNING, as the document spells it


class _Report(Collector):
    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document

    def collect(self) -> Iterator[Metric]:
        doc = self.document
        stack = str(doc["stack"])
        yield _gauge(
            "gpuplan_drift_detected",
            "1 when the last drift report found drift, else 0.",
            [((), 1.0 if doc["drift"] else 0.0)],
            stack,
        )
        findings = GaugeMetricFamily(
            "gpuplan_drift_findings", "Drift findings of the last report, by kind.", labels=["stack", "kind"]
        )
        for kind, count in doc["summary"]["findings"].items():
            findings.add_metric([stack, kind], float(count))
        yield findings
        ignored = GaugeMetricFamily(
            "gpuplan_drift_ignored",
            "Differences spec.ignore declares (not drift), by kind: zero for every kind no rule matched.",
            labels=["stack", "kind"],
        )
        counts = Counter(str(item["kind"]) for item in doc.get("ignored") or ())
        for kind in doc["summary"]["findings"]:
            ignored.add_metric([stack, kind], float(counts.get(kind, 0)))
        yield ignored
        yield _gauge(
            "gpuplan_last_check_timestamp_seconds",
            "When the last drift report ran (Unix time).",
            [((), _epoch(str(doc["checked_at"])))],
            stack,
        )
        coverage = doc["coverage"]
        yield _gauge(
            "gpuplan_coverage_ratio",
            "Managed GPU-stack objects out of all found.",
            [((), float(coverage["ratio"]))],
            stack,
        )
        yield _gauge(
            "gpuplan_managed_objects",
            "GPU-stack objects gpuplan manages (found live).",
            [((), float(coverage["managed"]))],
            stack,
        )
        yield _gauge(
            "gpuplan_unmanaged_objects",
            "GPU-stack objects found that gpuplan does not manage.",
            [((), float(coverage["unmanaged"]))],
            stack,
        )
        yield _gauge("gpuplan_nodes", "Nodes in the cluster.", [((), float(doc["summary"]["nodes"]))], stack)
        yield _gauge(
            "gpuplan_gpu_nodes",
            "Nodes with an NVIDIA GPU.",
            [((), float(doc["summary"]["gpu_nodes"]))],
            stack,
        )
        yield _gauge(
            "gpuplan_telemetry_not_scraped_nodes",
            "Nodes whose DCGM exporter could not be scraped (transient errors past the retries).",
            [((), float(doc["summary"].get("telemetry_not_scraped", 0)))],
            stack,
        )
        healthy = GaugeMetricFamily(
            "gpuplan_component_healthy",
            "1 when the component runs healthy on the node (ok or drifted), 0 when missing or unhealthy.",
            labels=["stack", "node", "component"],
        )
        temperature = GaugeMetricFamily(
            "gpuplan_gpu_temperature_celsius",
            "GPU temperature from DCGM.",
            labels=["stack", "node", "gpu", "uuid"],
        )
        xid = GaugeMetricFamily(
            "gpuplan_gpu_xid_last",
            "Last XID error a GPU reported (0: none).",
            labels=["stack", "node", "gpu", "uuid"],
        )
        for node in doc["nodes"]:
            for component, cell in node["components"].items():
                if cell["status"] != "n/a":
                    healthy.add_metric(
                        [stack, node["name"], component], 1.0 if cell["status"] in RUNNING else 0.0
                    )
            for gpu in node["telemetry"]["gpus"]:
                labels = [stack, node["name"], str(gpu["index"]), str(gpu.get("uuid") or "")]
                if gpu.get("temperature_c") is not None:
                    temperature.add_metric(labels, float(gpu["temperature_c"]))
                if gpu.get("xid") is not None:
                    xid.add_metric(labels, float(gpu["xid"]))
        yield healthy
        yield temperature
        yield xid


def _gauge(
    name: str, documentation: str, samples: list[tuple[tuple[str, ...], float]], stack: str
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["stack"])
    for _, value in samples:
        family.add_metric([stack], value)
    return family


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def render(document: Mapping[str, Any]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Report(document))
    return generate_latest(registry).decode("utf-8")
