"""The drift report of a live cluster, in one call: what ``gpuplan drift report`` (and its CronJob) runs.

:func:`check` refreshes (:func:`gpuplan.planner.observe.refresh.refresh`), folds the stack's pods page by page
into what a matrix cell needs (one paginated list, each pod reduced as its page arrives:
:func:`gpuplan.planner.drift.pods.pod_facts`, so a fleet's pods are never held whole), scrapes a bounded
number of DCGM exporters through the pod proxy (:func:`gpuplan.planner.observe.telemetry.scrape_nodes`, its
own reader per thread) or asks a Prometheus server that scrapes them
(:func:`gpuplan.planner.observe.telemetry.query_nodes`, a fixed number of queries), and builds the pure
:func:`gpuplan.planner.drift.report.build_report`. Read-only.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Protocol

from gpuplan.planner.drift import pods as drift_pods
from gpuplan.planner.drift import report as drift
from gpuplan.planner.observe import refresh, telemetry
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import MetricsQuerier, ProxyReader, ReducedLister
from gpuplan.providers.snapshot import ClusterReader
from gpuplan.state.model import StateFile, now_rfc3339


class DriftReader(ClusterReader, ReducedLister, Protocol):
    """What the report reads the cluster through: the refresh's reads and the pods folded page by page."""


def check(
    spec: Spec,
    state: StateFile,
    reader: DriftReader,
    *,
    open_reader: Callable[[], ProxyReader],
    spec_file: str,
    thresholds: telemetry.Thresholds,
    max_nodes: int | None,
    concurrency: int,
    querier: MetricsQuerier | None = None,
) -> drift.Report:
    """The drift report of the cluster ``reader`` reads (see the module doc). ``max_nodes`` None: no
    telemetry (``--no-telemetry``). ``querier``: read the telemetry from that Prometheus server, every node
    with a Ready exporter (no cap: the queries do not grow with nodes), instead of scraping."""
    checked_at, now = now_rfc3339(), time.time()
    snapshot = refresh.refresh(reader, spec, state)
    listed = drift_pods.stack_pods(snapshot, spec.metadata.name)
    pods = reader.list_reduced(
        "v1",
        "Pod",
        functools.partial(drift_pods.pod_facts, now=now, components=listed.components),
        label_selector=listed.selector,
    )
    requests = reader.request_count
    run, note = telemetry.ScrapeRun({}, 0), None
    if max_nodes is not None and querier is not None:
        targets, _ = drift.telemetry_targets(pods, max_nodes=None)
        run = telemetry.query_nodes(targets, querier)
        note = f"telemetry read from Prometheus at {querier.url} ({run.requests} queries)"
    elif max_nodes is not None:
        targets, note = drift.telemetry_targets(pods, max_nodes=max_nodes)
        run = telemetry.scrape_nodes(targets, open_reader, concurrency=concurrency)
        requests += run.requests
    return drift.build_report(
        drift.Inputs(
            spec=spec,
            state=state,
            snapshot=snapshot,
            pods=pods,
            scrapes=run.scrapes,
            not_scraped=run.not_scraped,
            no_series=run.no_series,
            checked_at=checked_at,
            now=now,
            thresholds=thresholds,
            telemetry_note=note,
            unscraped_reason="--no-telemetry" if max_nodes is None else "over --telemetry-max-nodes",
            spec_file=spec_file,
            api_requests=requests,
        )
    )
