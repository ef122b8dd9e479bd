"""The DCGM exporter serves the default counters of facts §6, one sample per GPU, with the real label set."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.sim.kubelet import dcgm, rules
from gpuplan.sim.kubelet.images import Role, identify
from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.scenario import GpuFault

DEFAULTS = {  # facts §6: name -> Prometheus type
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}


def _node(build: SimpleNamespace, model: str = "h100-80gb", count: int = 8) -> NodeGpuState:
    node: NodeGpuState = build.make_node(model, count, driver="580.105.08", toolkit="1.18.1", name="gpu-node")
    return node


def _samples(text: str) -> dict[str, Metric]:
    """Metric families by name, as Prometheus' own parser reads the exposition."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_every_default_metric_once_per_gpu_with_its_type(build: SimpleNamespace, now: float) -> None:
    node = _node(build)
    families = _samples(dcgm.render_metrics(node, build.exporter_pod(), now=now))
    assert set(families) == set(DEFAULTS)
    for name, kind in DEFAULTS.items():
        family = families[name]
        assert family.type == kind, name
        assert sorted(int(s.labels["gpu"]) for s in family.samples) == list(range(8)), name


def test_help_and_type_lines_are_the_exporters(build: SimpleNamespace, now: float) -> None:
    text = dcgm.render_metrics(_node(build), build.exporter_pod(), now=now)
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" in text
    assert (
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    )
    assert "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n" in text


def test_label_set_and_order(build: SimpleNamespace, now: float) -> None:
    node = _node(build)
    text = dcgm.render_metrics(node, build.exporter_pod(), now=now)
    line = next(s for s in text.splitlines() if s.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    gpu = node.gpus[0]
    assert line.startswith(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",device="nvidia0",'
        f'modelName="NVIDIA H100 80GB HBM3",hostname="gpu-node",DCGM_FI_DRIVER_VERSION="580.105.08"}} '
    )
    families = _samples(text)
    for family in families.values():
        for sample in family.samples:
            assert sample.labels["DCGM_FI_DRIVER_VERSION"] == "580.105.08"
    xid = families["DCGM_FI_DEV_XID_ERRORS"].samples[0].labels
    assert list(xid)[-2:] == ["err_code", "err_msg"] and xid["err_code"] == "0"


def test_uuids_and_bus_ids_are_stable_and_distinct(build: SimpleNamespace) -> None:
    first, again = _node(build), _node(build)
    assert [g.uuid for g in first.gpus] == [g.uuid for g in again.gpus]
    assert len({g.uuid for g in first.gpus}) == len({g.pci_bus_id for g in first.gpus}) == 8
    other = build.make_node("h100-80gb", name="other-node")
    assert not {g.uuid for g in other.gpus} & {g.uuid for g in first.gpus}


@pytest.mark.parametrize(
    ("tag", "label"),
    [
        ("4.5.3-4.8.2-distroless", "Hostname"),
        ("3.3.9-3.6.1-ubuntu22.04", "Hostname"),
        ("4.6.0-4.8.3-distroless", "hostname"),
        ("latest", "hostname"),
    ],
)
def test_hostname_label_casing_by_exporter_release(
    build: SimpleNamespace, tag: str, label: str, now: float
) -> None:
    families = _samples(dcgm.render_metrics(_node(build), build.exporter_pod(tag), now=now))
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels[label] == "gpu-node"


def test_hostname_is_the_pod_name_without_node_name_env(build: SimpleNamespace, now: float) -> None:
    families = _samples(dcgm.render_metrics(_node(build), build.exporter_pod(node_name_env=False), now=now))
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels["hostname"] == "nvidia-dcgm-exporter-abcde"


def test_values_move_with_time_and_counters_only_grow(build: SimpleNamespace, now: float) -> None:
    node, pod = _node(build), build.exporter_pod()
    series = [_samples(dcgm.render_metrics(node, pod, now=now + step * 45)) for step in range(8)]
    utils = [[s.value for s in f["DCGM_FI_DEV_GPU_UTIL"].samples] for f in series]
    assert len({tuple(u) for u in utils}) > 1
    assert all(0 <= value <= 100 for row in utils for value in row)
    energy = [[s.value for s in f["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples] for f in series]
    for gpu in range(8):
        column = [row[gpu] for row in energy]
        assert column == sorted(column) and column[0] < column[-1]
    again = _samples(dcgm.render_metrics(node, pod, now=now))
    assert [s.value for s in again["DCGM_FI_DEV_GPU_UTIL"].samples] == utils[0]  # deterministic


def test_memory_accounting_adds_up(build: SimpleNamespace, now: float) -> None:
    families = _samples(dcgm.render_metrics(_node(build), build.exporter_pod(), now=now))
    for index in range(8):
        free, used, reserved = (
            families[f"DCGM_FI_DEV_FB_{part}"].samples[index].value for part in ("FREE", "USED", "RESERVED")
        )
        assert free + used + reserved == 81559


def test_gpu_faults_show_in_temperature_xid_and_utilization(build: SimpleNamespace, now: float) -> None:
    node = _node(build)
    node.gpu_faults[3] = GpuFault(node="gpu-node", gpu=3, temperature=95, xid=79, utilization=100)
    families = _samples(dcgm.render_metrics(node, build.exporter_pod(), now=now))
    by_gpu = {
        name: {s.labels["gpu"]: s for s in families[name].samples}
        for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL")
    }
    assert by_gpu["DCGM_FI_DEV_GPU_TEMP"]["3"].value == 95
    assert by_gpu["DCGM_FI_DEV_GPU_TEMP"]["2"].value < 95
    xid = by_gpu["DCGM_FI_DEV_XID_ERRORS"]["3"]
    assert (xid.value, xid.labels["err_code"], xid.labels["err_msg"]) == (
        79,
        "79",
        "GPU has fallen off the bus",
    )
    assert by_gpu["DCGM_FI_DEV_XID_ERRORS"]["2"].value == 0
    assert by_gpu["DCGM_FI_DEV_GPU_UTIL"]["3"].value == 100


def test_value_formats_follow_dcgm_field_types(build: SimpleNamespace, now: float) -> None:
    text = dcgm.render_metrics(_node(build, "rtx-3060", 1), build.exporter_pod(), now=now)
    power = next(s for s in text.splitlines() if s.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    util = next(s for s in text.splitlines() if s.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    ratio = next(s for s in text.splitlines() if s.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"))
    assert power.rsplit(" ", 1)[1].count(".") == 1 and len(power.rsplit(".", 1)[1]) == 6
    assert util.rsplit(" ", 1)[1].isdigit()
    assert len(ratio.rsplit(".", 1)[1]) == 6
    assert 'modelName="NVIDIA GeForce RTX 3060"' in util


def test_exporter_outcome_on_right_and_wrong_nodes(build: SimpleNamespace, now: float) -> None:
    pod = build.exporter_pod()
    assert identify(pod) is Role.DCGM_EXPORTER
    ready = rules.evaluate(pod, _node(build), rules.PodContext(now=now))
    assert (ready.phase, ready.ready, ready.init_done, ready.effect) == ("Running", True, 1, None)
    waiting = rules.evaluate(pod, build.make_node("h100-80gb", toolkit="1.18.1"), rules.PodContext(now=now))
    assert (waiting.phase, waiting.init_done, waiting.ready) == ("Pending", 0, False)


def test_custom_collectors_from_a_config_map(build: SimpleNamespace, now: float) -> None:
    csv = (
        "# custom\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.\n"
        "DCGM_FI_DRIVER_VERSION, label, Driver Version\nDCGM_FI_DEV_SERIAL, label, Device Serial Number\n"
    )
    lookup = build.config_maps(metrics={"dcgm-metrics.csv": csv})
    pod = build.exporter_pod(collectors="/etc/dcgm-exporter/dcgm-metrics.csv", config_map="metrics")
    assert rules.evaluate(pod, _node(build), rules.PodContext(now=now, config_lookup=lookup)).ready
    families = _samples(dcgm.render_metrics(_node(build), pod, now=now, config_lookup=lookup))
    assert set(families) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    labels = families["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels
    assert list(labels)[-2:] == ["DCGM_FI_DRIVER_VERSION", "DCGM_FI_DEV_SERIAL"]


def test_unknown_field_in_custom_collectors_crash_loops(build: SimpleNamespace, now: float) -> None:
    lookup = build.config_maps(metrics={"dcgm-metrics.csv": "DCGM_FI_DEV_BOGUS, gauge, nothing\n"})
    pod = build.exporter_pod(collectors="/etc/dcgm-exporter/dcgm-metrics.csv", config_map="metrics")
    outcome = rules.evaluate(pod, _node(build), rules.PodContext(now=now, config_lookup=lookup))
    assert outcome.crash_looping and "could not find DCGM field DCGM_FI_DEV_BOGUS" in (outcome.message or "")


def test_serve_metrics_health_and_refusals(build: SimpleNamespace, now: float) -> None:
    node, pod = _node(build), build.exporter_pod()
    code, content_type, body = dcgm.serve(pod, node, 9400, "/metrics", now=now)
    assert (code, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    assert dcgm.serve(pod, node, 9400, "health", now=now)[:2] == (200, "text/plain; charset=utf-8")
    assert dcgm.serve(pod, node, 9400, "/nope", now=now)[0] == 404
    pod["status"] = {
        "podIP": "10.128.0.7",
        "containerStatuses": [
            {"name": "nvidia-dcgm-exporter", "state": {"waiting": {"reason": "PodInitializing"}}}
        ],
    }
    code, _, body = dcgm.serve(pod, node, 9400, "/metrics", now=now)
    assert (code, body) == (
        503,
        b"error trying to reach service: dial tcp 10.128.0.7:9400: connect: connection refused",
    )
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-11-29T12:00:00Z"}}
    assert dcgm.serve(pod, node, 9400, "/metrics", now=now)[0] == 200
    assert dcgm.serve(pod, node, 8080, "/metrics", now=now)[0] == 503
    assert dcgm.serve(build.plugin_pod(), node, 9400, "/metrics", now=now)[0] == 503


def test_exporter_with_standalone_dcgm_needs_the_local_hostengine(build: SimpleNamespace, now: float) -> None:
    pod = build.exporter_pod()
    pod["spec"]["containers"][0]["env"] += build.env(DCGM_REMOTE_HOSTENGINE_INFO="nvidia-dcgm:5555")
    node = _node(build)
    outcome = rules.evaluate(pod, node, rules.PodContext(now=now))
    assert outcome.crash_looping and "nvidia-dcgm:5555" in (outcome.message or "")
    hostengine = build.pod(
        [{"name": "nvidia-dcgm-ctr", "image": "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"}],
        init=[build.validation("toolkit", False)],
    )
    assert (
        identify(hostengine) is Role.DCGM
        and rules.evaluate(hostengine, node, rules.PodContext(now=now)).ready
    )
    node.ready_roles.add(Role.DCGM)
    assert rules.evaluate(pod, node, rules.PodContext(now=now)).ready
