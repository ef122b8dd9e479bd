"""GPU telemetry for the drift report: DCGM exporter scrapes parsed per GPU, judged against thresholds.

Called by :mod:`gpuplan.planner.drift.report` (pure parts: :func:`parse`, :func:`findings`,
:func:`heavy_load`) and by the ``drift report`` command (:func:`scrape_nodes`, the only I/O here, through the
pod proxy of a :class:`~gpuplan.providers.protocols.ProxyReader`, which the Kubernetes writer is).

The exporter's text is parsed with ``prometheus_client.parser``, never by hand. Per GPU (``gpu`` label) it
keeps the temperature (``DCGM_FI_DEV_GPU_TEMP``), utilisation (``DCGM_FI_DEV_GPU_UTIL``) and last XID
(``DCGM_FI_DEV_XID_ERRORS``, with ``err_code``/``err_msg`` labels where the exporter writes them), and the
driver version the exporter labels its samples with (``DCGM_FI_DRIVER_VERSION``, facts §6).

Thresholds (:class:`Thresholds`, from the spec's ``telemetry`` block with the CLI's flags over it,
:func:`thresholds_for`): a temperature at or above ``temperature_c`` (85 °C) and any non-zero XID are
``telemetry`` findings, and so are a utilisation or a framebuffer use (``DCGM_FI_DEV_FB_USED``/``FB_FREE``) at
or above their thresholds when the spec or CLI sets them; a utilisation at or above ``heavy_load_percent``
(90 %) is otherwise only informational (a busy GPU is not drift) and shows in the nodes table.

Scraping is per node by nature (one exporter pod each): :func:`scrape_nodes` runs at most ``concurrency``
scrapes at a time, each worker thread with a reader of its own (a provider is not thread-safe), and retries a
transient failure with the provider's :class:`~gpuplan.providers.k8s_errors.RetryPolicy`; a node whose scrape
still fails is "not scraped" (a note), never drift.

With a Prometheus server that scrapes the exporters (``spec.telemetry.prometheus`` or ``--prometheus``),
:func:`query_nodes` replaces the scrapes: one PromQL instant query per metric family read here, plus one for
the newest sample's age, whatever the node count. Each series is given to the node named by its ``node``
label (the scrape job's relabelling of Kubernetes SD's ``__meta_kubernetes_pod_node_name``, docs/drift.md),
else by the exporter's own ``Hostname`` label (``hostname`` from exporter 4.6.0-4.8.3; its value is the
``NODE_NAME`` the operator sets to the node's name: NVIDIA/dcgm-exporter
``internal/pkg/rendermetrics/render_metrics.go``, facts §6). Each series is folded into its node's readings
as the answer is read (:class:`FoldedSeries`: at 5,000 nodes an answer is 40,000 series), and a node's are
written back, when asked for, as the exposition text its exporter would have served (with the labels its
judges read), so the parser, the matrix's ``dcgm-metrics`` gate and the driver-version fallback judge both
sources alike. A node with a Ready exporter and no series is
``no_series`` (a finding in the report: silence is not health); a server with no DCGM series at all, or
only ones older than :data:`STALE_AFTER_SECONDS`, says nothing of any node: an error.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from gpuplan.errors import ClusterUnreachableError, ProviderError, TransientProviderError
from gpuplan.planner.health.gates import Scrape
from gpuplan.planner.health.nodes import NODE_LABELS, metric_families
from gpuplan.planner.health.nodes import series_node as node_of
from gpuplan.planner.spec.telemetry import TelemetrySettings
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.protocols import MetricsQuerier, PromSample, ProxyReader

TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
UTILISATION = "DCGM_FI_DEV_GPU_UTIL"
XID = "DCGM_FI_DEV_XID_ERRORS"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
READ = (TEMPERATURE, UTILISATION, XID, FB_USED, FB_FREE)
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
DEFAULT_PORT = 9400
DEFAULT_PATH = "/metrics"
STALE_AFTER_SECONDS = 300.0
"""Prometheus's default lookback (``--query.lookback-delta`` 5m): a newest sample older than this is stale."""


@dataclass(frozen=True)
class Thresholds:
    """When a GPU reading becomes a finding (temperature, XID, and utilisation or memory when set) or a note
    (heavy load). Built from the spec's ``telemetry`` block and the CLI by :func:`thresholds_for`."""

    temperature_c: float = 85.0
    heavy_load_percent: float = 90.0
    report_xid: bool = True
    utilisation_percent: float | None = None
    memory_used_percent: float | None = None


def thresholds_for(
    settings: TelemetrySettings,
    *,
    temperature_c: float | None = None,
    utilisation_percent: float | None = None,
    report_xid: bool | None = None,
    memory_used_percent: float | None = None,
    heavy_load_percent: float = 90.0,
) -> Thresholds:
    """The spec's thresholds, each overridden by the CLI flag given for it (None: not given)."""
    return Thresholds(
        temperature_c=settings.temperature_celsius if temperature_c is None else temperature_c,
        heavy_load_percent=heavy_load_percent,
        report_xid=settings.xid if report_xid is None else report_xid,
        utilisation_percent=settings.utilisation_percent
        if utilisation_percent is None
        else utilisation_percent,
        memory_used_percent=settings.memory_used_percent
        if memory_used_percent is None
        else memory_used_percent,
    )


@dataclass(frozen=True)
class GpuReading:
    """One GPU as its exporter reports it; ``None``: the exporter did not report that field."""

    index: str
    uuid: str | None = None
    model: str | None = None
    temperature_c: float | None = None
    utilisation_percent: float | None = None
    xid: int | None = None
    xid_message: str | None = None
    memory_used_percent: float | None = None
    """Framebuffer used out of used + free, when the exporter reports both."""


@dataclass(frozen=True)
class NodeTelemetry:
    """What one node's scrape said: its GPUs (by index) and the driver version the exporter saw."""

    gpus: tuple[GpuReading, ...]
    driver_version: str | None = None


@dataclass(frozen=True)
class TelemetryFinding:
    """A reading past a threshold on one GPU of one node."""

    node: str
    gpu: str
    uuid: str | None
    detail: str
    metric: str
    value: float


def parse(text: str) -> NodeTelemetry:
    """The GPUs of one exporter scrape. Raises ValueError when the text is not the Prometheus format."""
    fields: dict[str, dict[str, object]] = {}
    driver: str | None = None
    for family in metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            driver = driver or labels.get(DRIVER_LABEL) or None
            if sample.name not in READ or "gpu" not in labels:
                continue
            gpu = fields.setdefault(labels["gpu"], {})
            gpu.setdefault("uuid", labels.get("UUID"))
            gpu.setdefault("model", labels.get("modelName"))
            gpu[sample.name] = float(sample.value)
            if sample.name == XID and labels.get("err_msg"):
                gpu["xid_message"] = labels["err_msg"]
    readings = tuple(_reading(index, values) for index, values in sorted(fields.items(), key=_gpu_order))
    return NodeTelemetry(readings, driver)


def _gpu_order(item: tuple[str, object]) -> tuple[int, str]:
    index = item[0]
    return (int(index), index) if index.isdigit() else (1 << 30, index)


def _reading(index: str, values: Mapping[str, object]) -> GpuReading:
    def number(name: str) -> float | None:
        value = values.get(name)
        return float(value) if isinstance(value, float) else None

    xid = number(XID)
    message = values.get("xid_message")
    used, free = number(FB_USED), number(FB_FREE)
    memory = (
        round(100.0 * used / (used + free), 1)
        if used is not None and free is not None and used + free
        else None
    )
    return GpuReading(
        index=index,
        uuid=_text(values.get("uuid")),
        model=_text(values.get("model")),
        temperature_c=number(TEMPERATURE),
        utilisation_percent=number(UTILISATION),
        xid=int(xid) if xid is not None else None,
        xid_message=_text(message),
        memory_used_percent=memory,
    )


def _text(value: object) -> str | None:
    return str(value) if value else None


def findings(node: str, telemetry: NodeTelemetry, thresholds: Thresholds) -> list[TelemetryFinding]:
    """Readings past the thresholds, GPU by GPU: a hot GPU, a busy or full one (when set), an XID error."""
    found = []
    for gpu in telemetry.gpus:
        name = _describe(node, gpu)
        if gpu.temperature_c is not None and gpu.temperature_c >= thresholds.temperature_c:
            found.append(
                TelemetryFinding(
                    node,
                    gpu.index,
                    gpu.uuid,
                    f"{name} runs at {gpu.temperature_c:g} °C (threshold {thresholds.temperature_c:g} °C)",
                    TEMPERATURE,
                    gpu.temperature_c,
                )
            )
        busy = thresholds.utilisation_percent
        if busy is not None and gpu.utilisation_percent is not None and gpu.utilisation_percent >= busy:
            found.append(
                TelemetryFinding(
                    node,
                    gpu.index,
                    gpu.uuid,
                    f"{name} is {gpu.utilisation_percent:g} % utilised (threshold {busy:g} %)",
                    UTILISATION,
                    gpu.utilisation_percent,
                )
            )
        full = thresholds.memory_used_percent
        if full is not None and gpu.memory_used_percent is not None and gpu.memory_used_percent >= full:
            found.append(
                TelemetryFinding(
                    node,
                    gpu.index,
                    gpu.uuid,
                    f"{name} has {gpu.memory_used_percent:g} % of its memory in use (threshold {full:g} %)",
                    FB_USED,
                    gpu.memory_used_percent,
                )
            )
        if thresholds.report_xid and gpu.xid:
            what = f" ({gpu.xid_message})" if gpu.xid_message else ""
            found.append(
                TelemetryFinding(
                    node, gpu.index, gpu.uuid, f"{name} reported XID {gpu.xid}{what}", XID, float(gpu.xid)
                )
            )
    return found


def heavy_load(telemetry: NodeTelemetry, thresholds: Thresholds) -> list[str]:
    """Indexes of GPUs at or above the heavy-load utilisation: informational, not drift."""
    return [
        gpu.index
        for gpu in telemetry.gpus
        if gpu.utilisation_percent is not None and gpu.utilisation_percent >= thresholds.heavy_load_percent
    ]


def _describe(node: str, gpu: GpuReading) -> str:
    parts = [f"GPU {gpu.index}"]
    if gpu.uuid:
        parts.append(f"UUID {gpu.uuid}")
    if gpu.model:
        parts.append(gpu.model)
    return f"{parts[0]} ({', '.join(parts[1:])}) on {node}" if len(parts) > 1 else f"{parts[0]} on {node}"


# --------------------------------------------------------------------------------------------- scraping


@dataclass(frozen=True)
class Target:
    """The exporter pod to scrape for one node (``pod`` None: none runs there, nothing to scrape)."""

    node: str
    namespace: str
    pod: str


@dataclass(frozen=True)
class ScrapeRun:
    """What :func:`scrape_nodes` got: the scrapes by node, the requests made, and the nodes that could not be
    scraped at all (a 429, 5xx or dropped connection that outlasted the retries), with the reason."""

    scrapes: Mapping[str, Scrape]
    requests: int
    not_scraped: dict[str, str] = field(default_factory=dict)
    no_series: tuple[str, ...] = ()
    """Nodes with a Ready exporter that the Prometheus server has no series for (:func:`query_nodes`)."""


def scrape_nodes(
    targets: Sequence[Target],
    open_reader: Callable[[], ProxyReader],
    *,
    concurrency: int = 8,
    port: int = DEFAULT_PORT,
    path: str = DEFAULT_PATH,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ScrapeRun:
    """One scrape per target, ``concurrency`` at a time.

    A transient failure (429, 5xx, a dropped connection) is retried as the provider retries its reads (the
    same :class:`RetryPolicy`, Retry-After honoured); one that outlasts the retries says nothing about the
    node, so the node is ``not_scraped`` rather than given a failed Scrape (which the matrix would judge as
    drift). A pod that answers with another error is that node's problem (its Scrape carries the error); an
    unreachable cluster is everyone's, so :class:`ClusterUnreachableError` propagates."""
    policy = retry or RetryPolicy()
    local = threading.local()
    readers: list[ProxyReader] = []
    lock = threading.Lock()

    def reader() -> ProxyReader:
        current: ProxyReader | None = getattr(local, "reader", None)
        if current is None:
            current = open_reader()
            local.reader = current
            with lock:
                if all(current is not known for known in readers):  # a shared reader counts and closes once
                    readers.append(current)
        return current

    def one(target: Target) -> tuple[str, Scrape | str]:
        attempt = 0
        while True:
            attempt += 1
            try:
                text = reader().proxy_get(target.namespace, target.pod, port, path)
            except ClusterUnreachableError:
                raise
            except TransientProviderError as exc:
                if attempt >= policy.attempts:
                    return target.node, f"{exc.summary} (after {attempt} attempts)"
                sleep(policy.delay(attempt, exc.retry_after))
                continue
            except ProviderError as exc:
                return target.node, Scrape(target.pod, error=exc.summary)
            return target.node, Scrape(target.pod, text=text.decode("utf-8", "replace"))

    try:
        if not targets:
            return ScrapeRun({}, 0)
        with ThreadPoolExecutor(
            max_workers=max(1, min(concurrency, len(targets))), thread_name_prefix="gpuplan-scrape"
        ) as pool:
            results = dict(pool.map(one, targets))
        return ScrapeRun(
            {node: got for node, got in results.items() if isinstance(got, Scrape)},
            sum(r.request_count for r in readers),
            {node: got for node, got in results.items() if isinstance(got, str)},
        )
    finally:
        for opened in readers:
            opened.close()


# ------------------------------------------------------------------------------------------ Prometheus


def query_nodes(
    targets: Sequence[Target], querier: MetricsQuerier, *, stale_after: float = STALE_AFTER_SECONDS
) -> ScrapeRun:
    """The targets' telemetry from Prometheus: :data:`READ`'s families as instant queries, each node's series
    as its exporter's text (see the module doc). Each series is folded into its node's readings as it is
    read (:class:`FoldedSeries`), so neither an answer nor every node's text is held at once. Raises
    :class:`ProviderError` naming the server when it has no DCGM series at all or only stale ones; the
    querier's own errors propagate."""
    if not targets:
        return ScrapeRun({}, 0)
    before = querier.request_count
    check_fresh(querier, stale_after)
    folded = FoldedSeries({target.node: target.pod for target in targets})
    for family in READ:
        for sample in querier.stream(family):
            folded.add(family, sample)
    missing = tuple(sorted(set(folded.pods) - set(folded)))
    return ScrapeRun(folded, querier.request_count - before, {}, missing)


_Shared = TypeVar("_Shared", str, tuple[str, str])

KEPT_LABELS = ("DCGM_FI_DRIVER_VERSION", "UUID", "err_msg", "gpu", "modelName")
"""The labels of a series that its judges read (:func:`parse`, the ``dcgm-metrics`` gate, the driver-version
fallback), in the order an exposition line writes them; the rest (the scrape job's, the PCI bus) are
dropped as the series is folded."""


class FoldedSeries(Mapping[str, Scrape]):
    """Each node's Prometheus series, as the scrape its exporter would have served (a mapping of node to
    :class:`Scrape`), folded as they arrive: per node, each GPU's :data:`KEPT_LABELS` (held once for its
    families, each label shared between GPUs where equal) and its value of each :data:`READ` family. A
    node's text is written only when asked for, so the fold grows with the GPUs, never with a series'
    labels or its text.
    Two series of a node with the same kept labels (a MIG GPU's instances) keep the last value, as
    :func:`parse` keeps the last sample of a GPU."""

    def __init__(self, pods: Mapping[str, str]) -> None:
        self.pods = pods
        """The nodes asked about, with the exporter pod that stands for each."""
        self._series: dict[str, dict[tuple[tuple[str, str], ...], list[float | None]]] = {}
        self._shared: dict[object, object] = {}

    def add(self, family: str, sample: PromSample) -> None:
        """Fold one series of ``family`` (one of :data:`READ`) into its node's readings."""
        node = node_of(sample.labels)
        if node is None or node not in self.pods:
            return
        labels = tuple(
            self._share((name, sample.labels[name])) for name in KEPT_LABELS if name in sample.labels
        )
        # the GPU's labels tuple itself is kept once by its node's dict: the next family's finds it as its key
        values = self._series.setdefault(self._share(node), {}).setdefault(labels, [None] * len(READ))
        values[READ.index(family)] = sample.value

    def _share(self, value: _Shared) -> _Shared:
        """The one copy of ``value`` the fold holds (a node's name, and a label its GPUs share)."""
        shared: _Shared = self._shared.setdefault(value, value)  # type: ignore[assignment]
        return shared

    def __getitem__(self, node: str) -> Scrape:
        lines = []
        for index, family in enumerate(READ):
            for labels, values in self._series[node].items():
                value = values[index]
                if value is not None:
                    lines.append(exposition_line(PromSample({"__name__": family, **dict(labels)}, value)))
        return Scrape(self.pods[node], text="\n".join(lines) + "\n")

    def __iter__(self) -> Iterator[str]:
        return iter(self._series)

    def __len__(self) -> int:
        return len(self._series)


def check_fresh(querier: MetricsQuerier, stale_after: float = STALE_AFTER_SECONDS) -> None:
    """Raise :class:`ProviderError` naming the server when it has no DCGM series, or only stale ones."""
    age = querier.query(f"time() - max(timestamp({TEMPERATURE}))")
    if not age:
        raise ProviderError(
            f"Prometheus has no {TEMPERATURE} series: it does not scrape the DCGM exporters (or no longer)",
            where=querier.url,
            hint="check its DCGM exporter scrape job on its /targets page (docs/drift.md shows one), or drop "
            "--prometheus / spec.telemetry.prometheus to scrape the exporters directly",
        )
    if age[0].value > stale_after:
        raise ProviderError(
            f"Prometheus is stale: its newest {TEMPERATURE} sample is {age[0].value:.0f} s old "
            f"(more than {stale_after:g} s)",
            where=querier.url,
            hint="check that its DCGM exporter targets are up on its /targets page",
        )


def driver_versions(querier: MetricsQuerier) -> dict[str, str]:
    """Each node's driver version as its exporter labels its series (``DCGM_FI_DRIVER_VERSION``, facts §6),
    in one query counted down to a series per node and version, so the answer stays small on a fleet."""
    check_fresh(querier)
    by = ", ".join((*NODE_LABELS, DRIVER_LABEL))
    found: dict[str, str] = {}
    for sample in querier.query(f"count by ({by}) ({TEMPERATURE})"):
        node, version = node_of(sample.labels), sample.labels.get(DRIVER_LABEL)
        if node and version:
            found.setdefault(node, version)
    return found


def exposition_line(sample: PromSample) -> str:
    """One sample in the text format an exporter serves: ``name{label="value",...} value``."""
    labels = ",".join(
        f'{name}="{_escaped(value)}"' for name, value in sorted(sample.labels.items()) if name != "__name__"
    )
    return f"{sample.labels.get('__name__', '')}{{{labels}}} {_number(sample.value)}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def parse_all(scrapes: Mapping[str, Scrape]) -> dict[str, NodeTelemetry | str]:
    """Each node's parsed telemetry, or the reason it has none (the scrape failed, the text was not valid)."""
    parsed: dict[str, NodeTelemetry | str] = {}
    for node, scrape in scrapes.items():
        if scrape.text is None:
            parsed[node] = scrape.error or "not scraped"
            continue
        try:
            parsed[node] = parse(scrape.text)
        except ValueError as exc:
            parsed[node] = f"the metrics are not Prometheus text: {exc}"
    return parsed
