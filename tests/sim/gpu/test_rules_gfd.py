"""GFD writes exactly the labels of facts §4 for the node's GPU, driver and sharing config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.kubelet import gfd, rules
from gpuplan.sim.kubelet.images import Role, identify

# catalog key -> (gpu.product, gpu.memory, gpu.family, compute major/minor, mig.capable, gpu.mode) per facts
# §4
EXPECTED = {
    "rtx-3060": ("NVIDIA-GeForce-RTX-3060", "12288", "ampere", "8", "6", "false", "graphics"),
    "t4": ("Tesla-T4", "15360", "turing", "7", "5", "false", "compute"),
    "v100": ("Tesla-V100-SXM2-32GB", "32768", "volta", "7", "0", "false", "compute"),
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", "81920", "ampere", "8", "0", "true", "compute"),
    "l40s": ("NVIDIA-L40S", "46068", "ada-lovelace", "8", "9", "false", "compute"),
    "h100-80gb": ("NVIDIA-H100-80GB-HBM3", "81559", "hopper", "9", "0", "true", "compute"),
    "h200": ("NVIDIA-H200", "143771", "hopper", "9", "0", "true", "compute"),
    "b200": ("NVIDIA-B200", "183359", "blackwell", "10", "0", "true", "compute"),
}
GFD_KEYS = {
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/gpu.mode",
    "nvidia.com/gpu.machine",
    "nvidia.com/cuda.driver-version.major",
    "nvidia.com/cuda.driver-version.minor",
    "nvidia.com/cuda.driver-version.revision",
    "nvidia.com/cuda.driver-version.full",
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
    "nvidia.com/cuda.runtime-version.major",
    "nvidia.com/cuda.runtime-version.minor",
    "nvidia.com/cuda.runtime-version.full",
    "nvidia.com/cuda.runtime.major",
    "nvidia.com/cuda.runtime.minor",
    "nvidia.com/mig.capable",
    "nvidia.com/mps.capable",
    "nvidia.com/gfd.timestamp",
}


def _labels(outcome: rules.PodOutcome) -> dict[str, str | None]:
    assert outcome.ready and outcome.effect is not None
    assert outcome.effect.manager == "gpu-feature-discovery"
    return dict(outcome.effect.labels)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_labels_for_each_catalog_gpu(build: SimpleNamespace, key: str, now: float) -> None:
    count = 1 if key == "rtx-3060" else 8
    node = build.make_node(key, count, driver="580.105.08", toolkit="1.18.1")
    pod = build.gfd_pod()
    assert identify(pod) is Role.GFD
    labels = _labels(rules.evaluate(pod, node, rules.PodContext(now=now)))
    assert set(labels) == GFD_KEYS
    product, memory, family, major, minor, mig, mode = EXPECTED[key]
    assert labels["nvidia.com/gpu.product"] == product == CATALOG[key].product
    assert labels["nvidia.com/gpu.memory"] == memory
    assert labels["nvidia.com/gpu.family"] == family
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (major, minor)
    assert labels["nvidia.com/mig.capable"] == mig
    assert labels["nvidia.com/gpu.mode"] == mode
    assert labels["nvidia.com/gpu.count"] == str(count)
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == ("1", "none")
    assert labels["nvidia.com/mps.capable"] == "false"


def test_rtx_3060_lab_labels_match_the_seed_lab_checks(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("rtx-3060", 1, driver="580.105.08", toolkit="1.18.1", machine="MS-7C56")
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    assert {
        k: labels[k]
        for k in (
            "nvidia.com/gpu.product",
            "nvidia.com/gpu.memory",
            "nvidia.com/gpu.family",
            "nvidia.com/gpu.compute.major",
            "nvidia.com/gpu.compute.minor",
            "nvidia.com/mig.capable",
            "nvidia.com/gpu.machine",
        )
    } == {
        "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060",
        "nvidia.com/gpu.memory": "12288",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "6",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/gpu.machine": "MS-7C56",
    }


def test_driver_and_cuda_labels(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("h100-80gb", driver="550.54.15", toolkit="1.18.1")
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    assert {
        k.removeprefix("nvidia.com/"): v for k, v in labels.items() if k.startswith("nvidia.com/cuda.")
    } == {
        "cuda.driver-version.full": "550.54.15",
        "cuda.driver-version.major": "550",
        "cuda.driver-version.minor": "54",
        "cuda.driver-version.revision": "15",
        "cuda.driver.major": "550",
        "cuda.driver.minor": "54",
        "cuda.driver.rev": "15",
        "cuda.runtime-version.full": "12.4",
        "cuda.runtime-version.major": "12",
        "cuda.runtime-version.minor": "4",
        "cuda.runtime.major": "12",
        "cuda.runtime.minor": "4",
    }


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("580.105.08", (13, 0)),
        ("575.57.08", (12, 9)),
        ("570.195.03", (12, 8)),
        ("560.35.03", (12, 6)),
        ("550.163.01", (12, 4)),
        ("535.274.02", (12, 2)),
        ("595.91.07", (13, 2)),
        ("470.256.02", (11, 4)),
    ],
)
def test_cuda_version_from_the_driver_branch(driver: str, cuda: tuple[int, int]) -> None:
    assert gfd.cuda_version(driver) == cuda


def test_revision_keeps_its_leading_zero(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("a100-80gb", driver="580.105.08", toolkit="1.18.1")
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    assert labels["nvidia.com/cuda.driver-version.revision"] == "08"


def test_container_driver_is_what_gfd_reports(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("h100-80gb", toolkit="1.18.1")
    node.container_driver = "595.91.07"
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    assert labels["nvidia.com/cuda.driver-version.full"] == "595.91.07"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "13.2"


def test_time_slicing_replicas_4_on_t4(build: SimpleNamespace, now: float) -> None:
    ctx = rules.PodContext(now=now, config_lookup=build.config_maps(cfg={"any": build.TIME_SLICING_4}))
    node = build.make_node("t4", 4, driver="580.105.08", toolkit="1.18.1")
    labels = _labels(rules.evaluate(build.gfd_pod(config_map="cfg", default_key="any"), node, ctx))
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "4"  # the physical count stays


def test_renamed_sharing_keeps_the_plain_product_and_mps_is_capable(
    build: SimpleNamespace, now: float
) -> None:
    config = (
        "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    ctx = rules.PodContext(now=now, config_lookup=build.config_maps(cfg={"any": config}))
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    labels = _labels(rules.evaluate(build.gfd_pod(config_map="cfg", default_key="any"), node, ctx))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert (labels["nvidia.com/gpu.sharing-strategy"], labels["nvidia.com/mps.capable"]) == ("mps", "true")


def test_mig_strategy_label_only_when_not_none(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("a100-80gb", driver="580.105.08", toolkit="1.18.1")
    single = _labels(rules.evaluate(build.gfd_pod(mig="single"), node, rules.PodContext(now=now)))
    assert single["nvidia.com/mig.strategy"] == "single"
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"  # MIG is disabled on the GPUs
    node.labels.update({k: v for k, v in single.items() if v is not None})
    none = _labels(rules.evaluate(build.gfd_pod(mig="none"), node, rules.PodContext(now=now)))
    assert none["nvidia.com/mig.strategy"] is None  # removed, as GFD no longer writes it


def test_timestamp_moves_in_sleep_interval_steps(build: SimpleNamespace) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    stamps = [
        _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=t)))["nvidia.com/gfd.timestamp"]
        for t in (1_764_400_000.0, 1_764_400_019.0, 1_764_400_061.0)
    ]
    assert stamps[0] == stamps[1] != stamps[2]
    assert int(stamps[2] or 0) - int(stamps[0] or 0) == 60
    no_stamp = _labels(
        rules.evaluate(build.gfd_pod(GFD_NO_TIMESTAMP="true"), node, rules.PodContext(now=1.0))
    )
    assert "nvidia.com/gfd.timestamp" not in no_stamp


def test_waits_for_the_stack_and_removal_takes_only_gfds_labels(build: SimpleNamespace, now: float) -> None:
    bare = build.make_node("h100-80gb", toolkit="1.18.1")
    waiting = rules.evaluate(build.gfd_pod(), bare, rules.PodContext(now=now))
    assert (waiting.init_done, waiting.ready, waiting.effect) == (0, False, None)
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1")
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    node.labels.update({k: v for k, v in labels.items() if v is not None})
    node.labels.update(
        {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.deploy.driver": "pre-installed",
            "nvidia.com/device-plugin.config": "any",
            "nvidia.com/mig.config": "all-disabled",
        }
    )
    removal = rules.removal_effect(build.gfd_pod(), node, rules.PodContext(now=now))
    assert removal is not None and removal.manager == "gpu-feature-discovery"
    assert set(removal.labels) == GFD_KEYS and set(removal.labels.values()) == {None}


def test_without_nvml_gfd_crash_loops(build: SimpleNamespace, now: float) -> None:
    node = build.make_node("h100-80gb", driver="580.105.08", toolkit="1.18.1", defaultRuntime="runc")
    pod = build.gfd_pod()
    del pod["spec"]["runtimeClassName"]
    del pod["spec"]["initContainers"]
    outcome = rules.evaluate(pod, node, rules.PodContext(now=now))
    assert outcome.crash_looping and "failed to initialize NVML" in (outcome.message or "")


@pytest.mark.parametrize(
    ("product_name", "label"),
    [
        ("DGXA100 920-23687-2530-000", "DGXA100-920-23687-2530-000"),
        ("DGX-1", "DGX-1"),
        ("PIO-4124GS-TNR-01-NC24B", "PIO-4124GS-TNR-01-NC24B"),
        ("Standard PC (Q35 + ICH9, 2009)", None),
    ],
)
def test_machine_label_is_the_dmi_name_with_dashes(
    build: SimpleNamespace, product_name: str, label: str | None, now: float
) -> None:
    node = build.make_node("a100-80gb", driver="580.105.08", toolkit="1.18.1", machine=product_name)
    labels = _labels(rules.evaluate(build.gfd_pod(), node, rules.PodContext(now=now)))
    assert labels.get("nvidia.com/gpu.machine") == label
