"""planner.observe.telemetry: DCGM exporter text parsed per GPU, thresholds, and the bounded scrape of many
nodes."""

from __future__ import annotations

import threading

import pytest

from gpuplan.errors import ClusterUnreachableError, ProviderError, TransientProviderError
from gpuplan.planner.observe import telemetry
from gpuplan.planner.observe.telemetry import Target, Thresholds
from gpuplan.providers.k8s_errors import RetryPolicy

# As the exporter renders it (render_metrics.go), trimmed to the fields the report reads.
SCRAPE = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="h1",DCGM_FI_DRIVER_VERSION="580.105.08"} 95
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:02:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="h1",DCGM_FI_DRIVER_VERSION="580.105.08"} 61
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="580.105.08"} 12
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bbbb",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="580.105.08"} 93
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",err_code="79",err_msg="GPU has fallen off the bus"} 79
DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-bbbb",modelName="NVIDIA H100 80GB HBM3",err_code="0",err_msg=""} 0
"""


def test_a_scrape_is_parsed_per_gpu_with_the_driver_the_exporter_saw() -> None:
    parsed = telemetry.parse(SCRAPE)
    assert parsed.driver_version == "580.105.08"
    first, second = parsed.gpus
    assert (
        first.index,
        first.uuid,
        first.model,
        first.temperature_c,
        first.utilisation_percent,
        first.xid,
        first.xid_message,
    ) == ("0", "GPU-aaaa", "NVIDIA H100 80GB HBM3", 95.0, 12.0, 79, "GPU has fallen off the bus")
    assert (second.index, second.xid, second.xid_message) == ("1", 0, None)


def test_thresholds_make_findings_for_heat_and_xid_and_only_a_note_for_load() -> None:
    parsed = telemetry.parse(SCRAPE)
    found = telemetry.findings("h1", parsed, Thresholds())
    assert [(f.gpu, f.metric, f.value) for f in found] == [
        ("0", "DCGM_FI_DEV_GPU_TEMP", 95.0),
        ("0", "DCGM_FI_DEV_XID_ERRORS", 79.0),
    ]
    assert found[1].detail == (
        "GPU 0 (UUID GPU-aaaa, NVIDIA H100 80GB HBM3) on h1 reported XID 79 (GPU has fallen off the bus)"
    )
    assert "95 °C (threshold 85 °C)" in found[0].detail
    assert telemetry.heavy_load(parsed, Thresholds()) == ["1"]
    assert telemetry.findings("h1", parsed, Thresholds(temperature_c=96, report_xid=False)) == []
    assert telemetry.heavy_load(parsed, Thresholds(heavy_load_percent=95)) == []


def test_text_that_is_not_prometheus_is_a_reason_not_a_crash() -> None:
    from gpuplan.planner.health.gates import Scrape

    parsed = telemetry.parse_all(
        {
            "a": Scrape("p", text="this is { not metrics"),
            "b": Scrape("p", error="503"),
            "c": Scrape("p", text=SCRAPE),
        }
    )
    assert isinstance(parsed["a"], str) and "not Prometheus text" in parsed["a"]
    assert parsed["b"] == "503"
    assert isinstance(parsed["c"], telemetry.NodeTelemetry)


class Reader:
    """A pod proxy that answers every pod with SCRAPE, except the pods named in ``failing``."""

    active = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, opened: list[Reader], failing: dict[str, Exception]) -> None:
        self.request_count = 0
        self.closed = False
        self.failing = failing
        self.threads: set[int] = set()
        opened.append(self)

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        assert (port, path) == (9400, "/metrics")
        self.threads.add(threading.get_ident())
        with Reader.lock:
            Reader.active += 1
            Reader.peak = max(Reader.peak, Reader.active)
        try:
            self.request_count += 1
            if pod in self.failing:
                raise self.failing[pod]
            return SCRAPE.encode()
        finally:
            with Reader.lock:
                Reader.active -= 1

    def close(self) -> None:
        self.closed = True


def test_scrapes_run_bounded_with_a_reader_per_worker_and_all_are_closed() -> None:
    opened: list[Reader] = []
    targets = [Target(f"node-{i}", "gpu-operator", f"exporter-{i}") for i in range(12)]
    failing: dict[str, Exception] = {"exporter-3": ProviderError("503 no endpoints available")}
    run = telemetry.scrape_nodes(targets, lambda: Reader(opened, failing), concurrency=3)
    scrapes, requests = run.scrapes, run.requests
    assert set(scrapes) == {t.node for t in targets} and requests == 12 and run.not_scraped == {}
    assert scrapes["node-3"].error == "503 no endpoints available" and scrapes["node-3"].text is None
    assert scrapes["node-0"].text == SCRAPE and scrapes["node-0"].pod == "exporter-0"
    assert 1 <= len(opened) <= 3 and Reader.peak <= 3
    assert all(reader.closed for reader in opened)
    assert all(len(reader.threads) == 1 for reader in opened), "a reader is never shared between threads"


class Shared(Reader):
    """One reader handed to every worker; the barrier holds each scrape until three workers run at once."""

    def __init__(self, opened: list[Reader]) -> None:
        super().__init__(opened, {})
        self.barrier = threading.Barrier(3, timeout=30)
        self.closes = 0

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self.barrier.wait()
        return super().proxy_get(namespace, pod, port, path)

    def close(self) -> None:
        self.closes += 1
        super().close()


def test_a_reader_shared_by_the_workers_counts_its_requests_and_closes_once() -> None:
    shared = Shared([])
    targets = [Target(f"node-{i}", "gpu-operator", f"exporter-{i}") for i in range(3)]
    run = telemetry.scrape_nodes(targets, lambda: shared, concurrency=3)
    assert len(shared.threads) == 3, "three workers each asked open_reader for a reader"
    assert run.requests == 3 and shared.closes == 1


def test_an_unreachable_cluster_is_not_one_node_s_problem() -> None:
    opened: list[Reader] = []
    failing: dict[str, Exception] = {"exporter-0": ClusterUnreachableError("connection refused")}
    with pytest.raises(ClusterUnreachableError):
        telemetry.scrape_nodes([Target("node-0", "ns", "exporter-0")], lambda: Reader(opened, failing))
    assert all(reader.closed for reader in opened)
    assert telemetry.scrape_nodes([], lambda: Reader(opened, {})) == telemetry.ScrapeRun({}, 0, {})


class Flaky(Reader):
    """Answers each pod's first ``failures[pod]`` scrapes with ``error``, then SCRAPE."""

    def __init__(self, opened: list[Reader], failures: dict[str, int], error: Exception) -> None:
        super().__init__(opened, {})
        self.failures = failures
        self.error = error

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self.request_count += 1
        with Reader.lock:
            left = self.failures.get(pod, 0)
            self.failures[pod] = left - 1
        if left > 0:
            raise self.error
        return SCRAPE.encode()


def test_a_transient_scrape_failure_is_retried_with_the_provider_s_policy_then_not_scraped() -> None:
    opened: list[Reader] = []
    waits: list[float] = []
    failures = {"exporter-0": 2, "exporter-1": 99}
    error = TransientProviderError("scrape: the cluster answered 503 Service Unavailable", retry_after=0.5)
    targets = [Target("node-0", "ns", "exporter-0"), Target("node-1", "ns", "exporter-1")]
    run = telemetry.scrape_nodes(
        targets,
        lambda: Flaky(opened, failures, error),
        concurrency=1,
        retry=RetryPolicy(attempts=3),
        sleep=waits.append,
    )
    assert run.scrapes["node-0"].text == SCRAPE, "two 503s then an answer: scraped"
    assert "node-1" not in run.scrapes, (
        "a scrape that kept failing is no Scrape (the matrix would call it drift)"
    )
    assert run.not_scraped == {
        "node-1": "scrape: the cluster answered 503 Service Unavailable (after 3 attempts)"
    }
    assert run.requests == 3 + 3 and waits == [0.5] * 4, "Retry-After honoured between attempts"


MEMORY = """\
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa"} 76000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-bbbb"} 1000
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa"} 4000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-bbbb"} 79000
"""


def test_the_spec_s_thresholds_apply_and_each_cli_flag_overrides_its_own() -> None:
    from gpuplan.planner.spec.telemetry import TelemetrySettings

    settings = TelemetrySettings(
        temperature_celsius=60, utilisation_percent=90, xid=False, memory_used_percent=95
    )
    from_spec = telemetry.thresholds_for(settings)
    assert (
        from_spec.temperature_c,
        from_spec.utilisation_percent,
        from_spec.report_xid,
        from_spec.memory_used_percent,
    ) == (60, 90, False, 95)
    overridden = telemetry.thresholds_for(settings, temperature_c=99, report_xid=True, memory_used_percent=50)
    assert (
        overridden.temperature_c,
        overridden.utilisation_percent,
        overridden.report_xid,
        overridden.memory_used_percent,
    ) == (99, 90, True, 50)
    defaults = telemetry.thresholds_for(TelemetrySettings())
    assert (
        defaults.temperature_c,
        defaults.utilisation_percent,
        defaults.report_xid,
        defaults.memory_used_percent,
    ) == (85, None, True, None)


def test_utilisation_and_memory_are_findings_only_when_a_threshold_is_set() -> None:
    reading = telemetry.parse(SCRAPE + MEMORY)
    assert [gpu.memory_used_percent for gpu in reading.gpus] == [95.0, 1.2]
    metrics = {(f.gpu, f.metric) for f in telemetry.findings("h1", reading, Thresholds(temperature_c=200))}
    assert metrics == {("0", telemetry.XID)}, "utilisation and memory are off by default"
    busy = telemetry.findings(
        "h1",
        reading,
        Thresholds(temperature_c=200, report_xid=False, utilisation_percent=90, memory_used_percent=90),
    )
    assert [(f.gpu, f.metric, f.value) for f in busy] == [
        ("0", telemetry.FB_USED, 95.0),
        ("1", telemetry.UTILISATION, 93.0),
    ]
    assert "93 % utilised (threshold 90 %)" in busy[1].detail and "95 % of its memory" in busy[0].detail
