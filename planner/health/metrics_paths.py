"""Where the DCGM metrics gate reads the exporters' metrics, in order, and when it stops trying.

The ``dcgm-metrics`` gate (:mod:`gpuplan.planner.health.wait`) scrapes a sample of nodes' exporters. Three
paths can reach them; each is tried only once the one before it is refused for good:

1. **The pod proxy** (``pods/NAME:9400/proxy/metrics``), one exporter per sampled node: judges each node.
2. **The exporter's Service through the service proxy** (``services/NAME:9400/proxy/metrics``). The API
   server sends such a request to one Ready endpoint it picks at random (``proxy.RandomEndpoint`` in
   pkg/registry/core/service/storage/storage.go, Kubernetes v1.37.2), so this path cannot ask for a given
   node: it proves that the exporters serve metrics, and its answer is judged (GPU count included) on the
   node the answering exporter names in its series (its ``Hostname`` label, or a ``node`` label); every
   other sampled node's exporter counts by its Ready pod. The gate's note says so. Not tried after the pod
   proxy's ``address not allowed``: the pod registry refuses a pod IP that is not global unicast
   (loopback, link-local; pkg/registry/core/pod/strategy.go), and validation keeps the same addresses out
   of every EndpointSlice (``ValidateEndpointIP``, pkg/apis/core/validation/validation.go), so the Service
   has no endpoint to send to either.
3. **Prometheus**, when the spec names one for the drift report (``spec.telemetry.prometheus``): one PromQL
   query per round, ``max by (node, Hostname, hostname, gpu) (timestamp(METRIC))``; a node passes with the
   GPUs whose newest sample is no older than its exporter pod's Ready time (an older series is the
   previous exporter's, still inside Prometheus's lookback), judged per node as a scrape is.

What no wait changes (:class:`~gpuplan.providers.protocols.ProxyRefused`: the real server's 400, 401, 403,
or a 404 of the proxied path, :func:`gpuplan.providers.k8s_errors.proxy_error`; a Prometheus the spec names
that cannot be asked) refuses a path; what the server answers while the exporters start (503 ``error trying
to reach service`` or ``no endpoints available``, 502, a reset connection, a Prometheus that has not
scraped the new exporter yet) keeps the gate waiting on that path, as before. Once every path is refused the
gate fails at once (:meth:`MetricsPaths.failure`), naming each path and the server's reason for it (already
made printable by the provider) and the ways on: ``healthSampleNodes: 0`` or ``spec.telemetry.prometheus``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, TransientProviderError
from gpuplan.planner.health.gates import GateStatus, Obj, Scrape, condition_of, parse_time, pod_name
from gpuplan.planner.health.nodes import metric_families, series_node
from gpuplan.providers.k8s_errors import printable
from gpuplan.providers.protocols import MetricsQuerier, ProxyRefused, ServiceProxy

POD_PROXY = "the pod proxy"
SERVICE = "the Service proxy"
PROMETHEUS = "Prometheus"
PATHS = (POD_PROXY, SERVICE, PROMETHEUS)
ADDRESS_NOT_ALLOWED = "address not allowed"
"""The pod registry's message for a pod IP it will not proxy to (pkg/registry/core/pod/strategy.go)."""
WAYS_ON = (
    "set spec.dcgmExporter.healthSampleNodes: 0 to gate on the exporters' rollout and Ready pods alone, "
    "or name a Prometheus that scrapes them in spec.telemetry.prometheus"
)
NOT_SCRAPED = "GPU metrics not scraped: healthSampleNodes is 0 (the exporters count by their Ready pods)"

OpenQuerier = Callable[[], MetricsQuerier]
"""Opens the spec's Prometheus (``spec.telemetry.prometheus``) when a gate first needs it."""


@dataclass
class MetricsPaths:
    """One gate's paths to the exporters' metrics: which are refused and why, the note of the one in use,
    and the Prometheus client once opened."""

    open_querier: OpenQuerier | None = None
    refused: dict[str, str] = field(default_factory=dict)
    """path -> why it cannot serve, in the order found."""
    note: str | None = None
    """How the last round's metrics were read, when not through the pod proxy."""
    querier: MetricsQuerier | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse(self, path: str, why: str) -> None:
        """Record ``path`` as refused (the first reason stands: scrapes run on several threads)."""
        with self.lock:
            self.refused.setdefault(path, why)
            if path == POD_PROXY and why.endswith(ADDRESS_NOT_ALLOWED):
                self.refused.setdefault(
                    SERVICE,
                    "not tried: a pod IP the API server will not proxy to is no Service endpoint either",
                )

    def failure(self, check: str) -> GateStatus | None:
        """A failed verdict once every path is refused, naming each with its reason and the ways on."""
        if any(path not in self.refused for path in PATHS):
            return None
        tried = "; ".join(f"{path}: {self.refused[path]}" for path in PATHS)
        return GateStatus("failed", f"DCGM metrics cannot be read: {tried}; {WAYS_ON}", gate=check)

    def via_service(
        self, provider: object, params: Mapping[str, object], wanted: Mapping[str, Obj], metric: str
    ) -> dict[str, Scrape]:
        """The sampled nodes' scrapes from one GET through the exporter's Service (see the module doc)."""
        namespace, service = str(params.get("namespace") or ""), str(params.get("service") or "")
        if not service:
            raise _not_tried("the Service of an external exporter is not known")
        if not isinstance(provider, ServiceProxy):
            raise _not_tried("the client has no service proxy")
        port, path = int(str(params.get("port") or 9400)), str(params.get("path") or "/metrics")
        text = provider.service_proxy_get(namespace, service, port, path).decode("utf-8", "replace")
        where = f"Service {namespace}/{service}"
        answered = _answering_node(text, metric)
        scrapes = {node: Scrape(pod_name(pod), sampled_out=True) for node, pod in wanted.items()}
        if answered is not None and answered in wanted:
            scrapes[answered] = Scrape(where, text=text)
            judged = f"judged on {answered}, whose exporter answered"
        elif answered is not None:  # a node the sample left out (or of another pool): served is all it says
            judged = f"seen served by {answered or 'an exporter that names no node'}"
        else:  # no sample of the metric at all: the judge says so on a sampled node
            scrapes[next(iter(wanted))] = Scrape(where, text=text)
            judged = "judged on the first sampled node"
        self.note = (
            f"GPU metrics read through {where} ({POD_PROXY}: {self.refused.get(POD_PROXY)}): the "
            f"service proxy picks the exporter that answers, so the metrics were {judged}; the other "
            "exporters count by their Ready pods"
        )
        return scrapes

    def via_prometheus(self, wanted: Mapping[str, Obj], metric: str) -> dict[str, Scrape]:
        """The sampled nodes' scrapes from one PromQL query (see the module doc)."""
        querier = self._querier()
        since = {
            node: parse_time((condition_of(pod, "Ready") or {}).get("lastTransitionTime")) or 0.0
            for node, pod in wanted.items()
        }
        gpus: dict[str, set[str]] = {}
        for sample in querier.stream(f"max by (node, Hostname, hostname, gpu) (timestamp({metric}))"):
            node = series_node(sample.labels)
            if node in since and sample.value >= since[node]:
                gpus.setdefault(node, set()).add(sample.labels.get("gpu", ""))
        where = f"Prometheus {querier.url}"
        self.note = (
            f"GPU metrics read from {where} ({POD_PROXY}: {self.refused.get(POD_PROXY)}; "
            f"{SERVICE}: {self.refused.get(SERVICE)})"
        )
        missing = f"Prometheus has no {metric} series of the node since its exporter started"
        return {
            node: Scrape(where, text=_exposition(metric, gpus[node]))
            if node in gpus
            else Scrape(where, error=missing)
            for node in wanted
        }

    def fallback(
        self, provider: object, params: Mapping[str, object], wanted: Mapping[str, Obj]
    ) -> dict[str, Scrape]:
        """The sampled nodes' scrapes through the first path after the pod proxy that is not refused; a path
        refused for good is recorded and the next one tried; when none answers, each node's scrape says
        why."""
        metric = str(params.get("metric") or "")
        waiting: list[str] = []
        for path in (SERVICE, PROMETHEUS):
            if path in self.refused:
                continue
            try:
                if path == SERVICE:
                    return self.via_service(provider, params, wanted, metric)
                return self.via_prometheus(wanted, metric)
            except ProxyRefused as exc:
                self.refuse(path, refusal(exc))
            except TransientProviderError as exc:
                waiting.append(f"{path}: {printable(exc.summary)}")
            except GpuplanError as exc:  # a Prometheus that cannot be asked; any proxy answer but a refusal
                if path == PROMETHEUS:
                    self.refuse(path, printable(exc.summary))
                else:
                    waiting.append(f"{path}: {printable(exc.summary)}")
        why = "; ".join(waiting) or "no path to the exporters is left"
        return {node: Scrape(pod_name(pod), error=why) for node, pod in wanted.items()}

    def close(self) -> None:
        if self.querier is not None:
            self.querier.close()
            self.querier = None

    def _querier(self) -> MetricsQuerier:
        if self.open_querier is None:
            raise _not_tried("the spec names none in spec.telemetry.prometheus", tried="")
        if self.querier is None:
            self.querier = self.open_querier()
        return self.querier


def _not_tried(why: str, tried: str = "not tried: ") -> ProxyRefused:
    """A path refused before any request: no status, only why."""
    return ProxyRefused(why, status=0, reason=f"{tried}{why}")


def refusal(exc: ProxyRefused) -> str:
    """How a refused path is named in the gate's cause: the server's status and its own words."""
    return f"answered {exc.status}: {exc.reason}" if exc.status else exc.reason


def _exposition(metric: str, gpus: set[str]) -> str:
    """A sample of ``metric`` per GPU as an exporter would write it, for the gate's judge (the drift
    report's Prometheus source does the same: :class:`gpuplan.planner.observe.telemetry.FoldedSeries`)."""
    return "".join(f"{metric}{{gpu={json.dumps(gpu)}}} 1\n" for gpu in sorted(gpus))


def _answering_node(text: str, metric: str) -> str | None:
    """The node an exporter's answer names in its first sample of ``metric`` ("" when it names none);
    None when the answer has no such sample or is not metrics text."""
    try:
        for family in metric_families(text):
            for sample in family.samples:
                if sample.name == metric:
                    return series_node(sample.labels) or ""
    except ValueError:
        return None
    return None
