"""The pure MIG pieces (fleet facts §4): mig-parted geometry and refusals, the device plugin's resources,
GFD's labels, DCGM's per-instance samples and ``nvidia-smi -L``."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.sim.kubelet import dcgm, mig, nvidia_smi
from gpuplan.sim.kubelet.state import NodeGpuState

ALL_1G = [
    {"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
]
BALANCED = [
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
]


def _node(build: SimpleNamespace, model: str = "a100-80gb", count: int = 2) -> NodeGpuState:
    node: NodeGpuState = build.make_node(model, count, driver="580.105.08", toolkit="1.18.1")
    return node


def _partitioned(build: SimpleNamespace, entries: list[dict[str, object]]) -> NodeGpuState:
    node = _node(build)
    node.mig = mig.with_geometry(node, mig.geometry(entries, node))
    return node


def test_a_device_filter_selects_only_its_gpu(build: SimpleNamespace) -> None:
    assert mig.geometry(ALL_1G, _node(build)) == {0: ("1g.10gb",) * 7, 1: ("1g.10gb",) * 7}
    assert mig.geometry(ALL_1G, _node(build, "h200")) == {}
    only_one = [{"devices": [1], "mig-enabled": False}]
    assert mig.geometry(only_one, _node(build)) == {1: None}


@pytest.mark.parametrize(
    ("model", "devices", "words"),
    [
        ("a100-80gb", {"1g.18gb": 7}, "does not support MIG profile 1g.18gb"),
        ("a100-80gb", {"1g.10gb": 8}, "do not fit"),
        ("a100-80gb", {"3g.40gb": 2, "2g.20gb": 1}, "do not fit"),
        ("l40s", {"1g.10gb": 1}, "is not MIG capable"),
    ],
)
def test_geometries_the_gpu_cannot_take_are_refused(
    build: SimpleNamespace, model: str, devices: dict[str, int], words: str
) -> None:
    entries = [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]
    with pytest.raises(mig.MigConfigError, match=words):
        mig.geometry(entries, _node(build, model))


def test_parse_config_checks_the_version_and_entries() -> None:
    assert mig.parse_config("version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n") == {
        "a": [{"devices": "all", "mig-enabled": False}]
    }
    for text in (
        "version: v2\nmig-configs: {}\n",
        "version: v1\nmig-configs:\n  a: []\n",
        "version: v1\nx: 1\n",
    ):
        with pytest.raises(mig.MigConfigError):
            mig.parse_config(text)


def test_plugin_resources_by_strategy(build: SimpleNamespace) -> None:
    node = _partitioned(build, BALANCED)
    assert mig.plugin_resources(node, "mixed") == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "4",
        "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-3g.40gb": "2",
    }
    assert mig.plugin_resources(node, "single") == {"nvidia.com/gpu": "8"}
    assert mig.plugin_resources(node, "none") is None
    assert mig.plugin_resources(_node(build), "mixed") is None


def test_gfd_single_labels_one_profile_and_flags_a_mix(build: SimpleNamespace) -> None:
    labels = mig.gfd_labels(_partitioned(build, ALL_1G), "single")
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert (labels["nvidia.com/gpu.memory"], labels["nvidia.com/gpu.multiprocessors"]) == ("9856", "14")
    mixed = mig.gfd_labels(_partitioned(build, BALANCED), "single")
    assert mixed["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"


def test_gfd_mixed_labels_each_profile(build: SimpleNamespace) -> None:
    labels = mig.gfd_labels(_partitioned(build, BALANCED), "mixed")
    assert labels["nvidia.com/mig-3g.40gb.count"] == "2"
    assert labels["nvidia.com/mig-3g.40gb.memory"] == "40192"
    assert labels["nvidia.com/mig-2g.20gb.engines.copy"] == "2"
    assert labels["nvidia.com/gpu.replicas"] == "0"


def test_dcgm_samples_each_gpu_instance(build: SimpleNamespace, now: float) -> None:
    node = _partitioned(build, BALANCED)
    text = dcgm.render_metrics(node, build.exporter_pod(), now=now)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert [(s.labels["gpu"], s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]) for s in samples[:4]] == [
        ("0", "1g.10gb", "7"),
        ("0", "1g.10gb", "8"),
        ("0", "2g.20gb", "3"),
        ("0", "3g.40gb", "1"),
    ]
    line = next(s for s in text.splitlines() if s.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert 'modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",hostname=' in line
    assert len(samples) == 8


def test_nvidia_smi_lists_the_mig_devices(build: SimpleNamespace) -> None:
    node = _partitioned(build, BALANCED)
    out = nvidia_smi.run(["-L"], node, datetime.now(UTC)).stdout.splitlines()
    assert out[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")
    assert out[1].startswith("  MIG 1g.10gb     Device  0: (UUID: MIG-")
    assert out[4].startswith("  MIG 3g.40gb     Device  3: (UUID: MIG-")
    assert out[5].startswith("GPU 1: ")
