"""The drift report's telemetry from a Prometheus server (planner.observe.telemetry.query_nodes, through
planner.drift.live.check) on a FakeKubernetes cluster with a counting fake server: series mapped to nodes by
their node/Hostname/hostname label and judged as a scrape would be, a node without series a finding, a server
without series or with stale ones an error naming it, and a request count that does not grow with nodes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.errors import ProviderError
from gpuplan.planner.drift import live
from gpuplan.planner.observe import telemetry
from gpuplan.planner.observe.telemetry import Target, Thresholds
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.protocols import PromSample, ProxyReader

from .test_drift import Lab, gpu_node, scrape_text

URL = "http://prometheus.monitoring:9090"


def series(text: str, node_label: str, node: str) -> list[PromSample]:
    """An exporter's text as Prometheus stores it: each sample with its job's ``node`` label (or none)."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {"__name__": sample.name, **sample.labels, "job": "dcgm-exporter"}
            labels.pop("hostname", None)
            labels[node_label] = node
            found.append(PromSample(labels, sample.value))
    return found


class FakePrometheus:
    """Answers each metric family's instant query from ``samples``; counts every query."""

    def __init__(self, samples: Iterable[PromSample], *, age: float | None = 3.0) -> None:
        self.url = URL
        self.request_count = 0
        self.queries: list[str] = []
        self.samples = list(samples)
        self.age = age

    def query(self, promql: str) -> list[PromSample]:
        self.request_count += 1
        self.queries.append(promql)
        if promql.startswith("time()"):
            return [] if self.age is None else [PromSample({}, self.age)]
        return [s for s in self.samples if s.labels.get("__name__") == promql]

    def stream(self, promql: str) -> Iterator[PromSample]:
        yield from self.query(promql)

    def close(self) -> None:
        pass


class PodPages:
    """The fake cluster, with the drift report's page-by-page pods list added."""

    def __init__(self, cluster: FakeKubernetes) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def list_reduced(
        self,
        api_version: str,
        kind: str,
        reduce: Callable[[Mapping[str, Any]], Any],
        *,
        label_selector: str | None = None,
    ) -> list[Any]:
        listed = self._cluster.list_objects(api_version, kind, label_selector=label_selector)
        return [reduce(obj.manifest) for obj in listed]


def no_scrapes() -> ProxyReader:
    raise AssertionError("with a Prometheus server, no exporter is scraped")


def exporter_series(lab: Lab, node_label: str = "node", **faults: Any) -> list[PromSample]:
    """Every node's exporter series; ``faults`` (temperature=, xid=) on GPU 0 of the lab's first node."""
    return [
        sample
        for node in lab.nodes
        for sample in series(
            scrape_text(node, 2, **(faults if node == lab.nodes[0] else {})), node_label, node
        )
    ]


def live_report(lab: Lab, querier: FakePrometheus) -> Any:
    for pod in lab.pods:
        lab.cluster.put({"apiVersion": "v1", "kind": "Pod", **pod})
    return live.check(
        lab.spec,
        lab.state,
        PodPages(lab.cluster),  # type: ignore[arg-type]
        open_reader=no_scrapes,
        spec_file="gpustack.yaml",
        thresholds=Thresholds(),
        max_nodes=1000,
        concurrency=8,
        querier=querier,
    )


def fleet(nodes: int) -> Lab:
    return Lab([gpu_node(f"gpu-{i:03d}") for i in range(nodes)])


def test_the_report_s_prometheus_queries_do_not_grow_with_nodes() -> None:
    small, big = fleet(10), fleet(40)
    asked_small, asked_big = FakePrometheus(exporter_series(small)), FakePrometheus(exporter_series(big))
    assert not live_report(small, asked_small).findings
    assert not live_report(big, asked_big).findings
    assert asked_small.request_count == asked_big.request_count == len(telemetry.READ) + 1
    assert asked_small.queries == asked_big.queries


def test_prometheus_findings_are_those_of_the_scrapes_whichever_label_names_the_node() -> None:
    for label in telemetry.NODE_LABELS:
        lab = fleet(2)
        queried = live_report(lab, FakePrometheus(exporter_series(lab, label, temperature=95, xid=79)))
        scrapes = {node: lab.scrapes[node] for node in lab.nodes}
        scrapes[lab.nodes[0]] = telemetry.Scrape(
            "e", text=scrape_text(lab.nodes[0], 2, temperature=95, xid=79)
        )
        scraped = lab.report(scrapes=scrapes)
        assert [f.document() for f in queried.findings] == [f.document() for f in scraped.findings], label
        assert {f.data["metric"] for f in queried.findings} == {
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_XID_ERRORS",
        }
        assert [n.gpus for n in queried.nodes] == [n.gpus for n in scraped.nodes]
        assert queried.nodes[0].gpus[0].model == "NVIDIA A100-SXM4-80GB"


def test_a_node_without_series_is_a_telemetry_finding_naming_it() -> None:
    lab = fleet(3)
    silent = lab.nodes[1]
    report = live_report(lab, FakePrometheus(s for s in exporter_series(lab) if s.labels["node"] != silent))
    (finding,) = report.findings
    assert (finding.kind, finding.node, finding.component) == ("telemetry", silent, "dcgmExporter")
    assert finding.detail.startswith(f"no telemetry from Prometheus for node {silent}: ")
    (status,) = [n for n in report.nodes if n.row.name == silent]
    assert status.telemetry_error == "no telemetry from Prometheus"
    assert report.exit_code() == 2


@pytest.mark.parametrize(
    ("age", "said"),
    [(None, "Prometheus has no DCGM_FI_DEV_GPU_TEMP series"), (900.0, "Prometheus is stale: its newest")],
)
def test_a_server_without_series_or_with_stale_ones_is_an_error_naming_it(
    age: float | None, said: str
) -> None:
    lab = fleet(2)
    querier = FakePrometheus(exporter_series(lab) if age else (), age=age)
    with pytest.raises(ProviderError) as raised:
        live_report(lab, querier)
    assert raised.value.where == URL and raised.value.summary.startswith(said)
    assert raised.value.hint
    assert querier.request_count == 1, "the age is asked first: nothing else is worth asking then"


def test_label_values_survive_the_text_written_back() -> None:
    tricky = 'say "hi"\\ and\nbye'
    sample = PromSample(
        {"__name__": telemetry.XID, "gpu": "0", "UUID": "GPU-x", "err_msg": tricky, "node": "n"}, 43.0
    )
    run = telemetry.query_nodes([Target("n", "ns", "pod")], FakePrometheus([sample]))
    parsed = telemetry.parse_all(run.scrapes)["n"]
    assert isinstance(parsed, telemetry.NodeTelemetry)
    assert parsed.gpus[0].xid_message == tricky and parsed.gpus[0].xid == 43


class StreamOnly(FakePrometheus):
    """A server whose metric families must be read as they arrive: a family's answer is never asked whole."""

    def query(self, promql: str) -> list[PromSample]:
        assert promql.startswith("time()"), f"the answer of {promql} was asked whole"
        return super().query(promql)

    def stream(self, promql: str) -> Iterator[PromSample]:
        yield from super().query(promql)


def padded(samples: Iterable[PromSample], extra: int) -> list[PromSample]:
    """``samples`` with ``extra`` more labels each, as a scrape job and Kubernetes SD add them."""
    more = {f"__meta_label_{i}": f"a-long-label-value-{i:04d}-of-the-scrape-job" for i in range(extra)}
    return [PromSample({**sample.labels, **more}, sample.value) for sample in samples]


def test_each_series_is_folded_as_it_arrives_keeping_only_the_labels_judged() -> None:
    lab = fleet(3)
    targets = [Target(node, "gpu-operator", f"exporter-{node}") for node in lab.nodes]
    run = telemetry.query_nodes(targets, StreamOnly(padded(exporter_series(lab), 5)))
    for node in lab.nodes:
        text = run.scrapes[node].text or ""
        kept = {
            name
            for family in text_string_to_metric_families(text)
            for s in family.samples
            for name in s.labels
        }
        assert kept <= set(telemetry.KEPT_LABELS), kept
    scraped = telemetry.parse_all({node: lab.scrapes[node] for node in lab.nodes})
    assert telemetry.parse_all(run.scrapes) == scraped


def held_by_fold(samples: list[PromSample], pods: Mapping[str, str]) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        folded = telemetry.FoldedSeries(pods)
        for sample in samples:
            folded.add(str(sample.labels["__name__"]), sample)
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_fold_grows_with_the_gpus_never_with_a_series_labels() -> None:
    lab = fleet(30)
    pods = {node: f"exporter-{node}" for node in lab.nodes}
    bare = exporter_series(lab)
    labelled = padded(bare, 20)  # each series 1 KB longer
    held_by_fold(bare, pods)  # the first fold's one-off allocations (caches, code) are not the fold's
    assert held_by_fold(labelled, pods) <= held_by_fold(bare, pods) * 1.02
