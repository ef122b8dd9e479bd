"""The NVML provider against a fake pynvml built from the simulator's GPU catalog: every catalog GPU read
right, unsupported fields as None, no-driver hosts as one clear error, nvmlShutdown on every path. The real
pynvml is used where the host allows: its error classes are the fake's model, its no-driver answer is read
here when there is no driver, and a real GPU is read only when one exists (skipped otherwise)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpuplan.errors import ConfigError, ProviderError
from gpuplan.providers import fake_nvml, nvml
from gpuplan.providers.fake_nvml import FakeGpu, FakeNvml
from gpuplan.sim.catalog import CATALOG, GpuModel

MIG_CAPABLE = {"a100-80gb", "h100-80gb", "h200", "b200"}  # facts §10.2
NOT_MIG_CAPABLE = {"rtx-3060", "t4", "v100", "l40s"}
OPTIONAL_FIELDS = (
    "uuid",
    "pci_bus_id",
    "memory_total_mib",
    "memory_used_mib",
    "compute_capability",
    "mig_current",
    "mig_pending",
    "temperature_c",
    "power_usage_w",
    "power_limit_w",
    "utilization_gpu_pct",
    "utilization_memory_pct",
)


def fake_gpu(model: GpuModel, index: int = 0, **overrides: Any) -> FakeGpu:
    """What NVML reports for a catalog GPU, idle (the catalog's idle power, a cool die)."""
    values: dict[str, Any] = {
        "name": model.name,
        "memory_mib": model.memory_mib,
        "compute_capability": (model.cc_major, model.cc_minor),
        "mig_capable": model.mig_capable,
        "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{model.key}/{index}')}",
        "pci_bus_id": f"00000000:{index + 1:02X}:00.0",
        "memory_used_mib": index * 100,
        "temperature_c": 30 + index,
        "power_usage_w": float(model.idle_power_w),
        "power_limit_w": float(model.power_limit_w),
        "utilization_gpu": index,
        "utilization_memory": index // 2,
    }
    values.update(overrides)
    return FakeGpu(**values)


@pytest.mark.parametrize("key", sorted(CATALOG))
def test_every_catalog_gpu_reads_as_nvml_reports_it(key: str) -> None:
    model = CATALOG[key]
    fake = FakeNvml([fake_gpu(model, 0), fake_gpu(model, 1)], driver_version="580.105.08")
    host = nvml.read_local_host(fake)
    assert (host.driver_version, host.cuda_driver_version) == ("580.105.08", "13.0")
    assert [gpu.index for gpu in host.gpus] == [0, 1]
    for gpu, described in zip(host.gpus, fake.gpus):
        assert gpu.name == model.name
        assert gpu.memory_total_mib == model.memory_mib
        assert gpu.memory_used_mib == described.memory_used_mib
        assert gpu.compute_capability == (model.cc_major, model.cc_minor)
        assert gpu.uuid == described.uuid and gpu.pci_bus_id == described.pci_bus_id
        assert gpu.temperature_c == described.temperature_c
        assert gpu.power_usage_w == model.idle_power_w and gpu.power_limit_w == model.power_limit_w
        assert (gpu.utilization_gpu_pct, gpu.utilization_memory_pct) == (
            described.utilization_gpu,
            described.utilization_memory,
        )
        assert gpu.mig_capable is (key in MIG_CAPABLE)
        assert gpu.mig_current is (False if key in MIG_CAPABLE else None)
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown" and not fake.initialised


def test_mig_capability_follows_the_catalog_split() -> None:
    """A100/H100/H200/B200 answer MIG mode; RTX 3060/T4/V100/L40S say "not supported" (nvidia-smi's N/A)."""
    fake = FakeNvml([fake_gpu(CATALOG[key], i) for i, key in enumerate(sorted(CATALOG))])
    host = nvml.read_local_host(fake)
    by_name = {gpu.name: gpu.mig_capable for gpu in host.gpus}
    assert {key for key in CATALOG if by_name[CATALOG[key].name]} == MIG_CAPABLE
    assert {key for key in CATALOG if not by_name[CATALOG[key].name]} == NOT_MIG_CAPABLE


def test_mig_mode_current_and_pending() -> None:
    fake = FakeNvml(
        [
            fake_gpu(CATALOG["a100-80gb"], mig_current=True, mig_pending=False),
            fake_gpu(CATALOG["h200"], 1, mig_current=False, mig_pending=True),
        ]
    )
    first, second = nvml.read_local_host(fake).gpus
    assert (first.mig_current, first.mig_pending) == (True, False)
    assert (second.mig_current, second.mig_pending) == (False, True)


@pytest.mark.parametrize(
    ("raw", "expected"), [(13000, "13.0"), (12080, "12.8"), (12040, "12.4"), (11000, "11.0")]
)
def test_cuda_driver_version_in_major_minor(raw: int, expected: str) -> None:
    assert nvml.read_local_host(FakeNvml([], cuda_driver_version=raw)).cuda_driver_version == expected


def test_every_unsupported_field_is_none_not_a_crash() -> None:
    gpu = fake_gpu(CATALOG["t4"], unsupported=frozenset(fake_nvml.FIELDS))
    fake = FakeNvml([gpu])
    (read,) = nvml.read_local_host(fake).gpus
    assert read.name == "Tesla T4" and read.index == 0
    assert {name: getattr(read, name) for name in OPTIONAL_FIELDS} == dict.fromkeys(OPTIONAL_FIELDS)
    assert read.mig_capable is False
    assert fake.calls[-1] == "nvmlShutdown"


@pytest.mark.parametrize("field", fake_nvml.FIELDS)
def test_one_unsupported_field_leaves_the_others(field: str) -> None:
    model = CATALOG["a100-80gb"]
    (full,) = nvml.read_local_host(FakeNvml([fake_gpu(model)])).gpus
    (partial,) = nvml.read_local_host(FakeNvml([fake_gpu(model, unsupported=frozenset({field}))])).gpus
    changed = {f.name for f in dataclasses.fields(full) if getattr(full, f.name) != getattr(partial, f.name)}
    assert changed, f"{field} unsupported changed nothing"
    assert all(getattr(partial, name) is None for name in changed - {"mig_capable"})


def test_a_driver_without_the_versioned_temperature_call_uses_the_old_one() -> None:
    fake = FakeNvml([fake_gpu(CATALOG["v100"], temperature_c=71)], temperature_v=False)
    assert nvml.read_local_host(fake).gpus[0].temperature_c == 71
    assert "nvmlDeviceGetTemperatureV" in fake.calls and "nvmlDeviceGetTemperature" in fake.calls


def test_host_without_gpus() -> None:
    host = nvml.read_local_host(FakeNvml([], driver_version="595.91.07"))
    assert host.gpus == () and host.driver_version == "595.91.07"


@pytest.mark.parametrize(
    ("fake", "summary"),
    [
        (
            FakeNvml.without_library(),
            "No NVIDIA driver on this host: libnvidia-ml.so.1 not found (NVML: Library Not Found)",
        ),
        (
            FakeNvml.driver_not_loaded(),
            "No NVIDIA driver on this host: the nvidia kernel module is not loaded (NVML: Driver Not Loaded)",
        ),
        (
            FakeNvml(init_error="NoPermission"),
            "No access to the NVIDIA driver on this host: permission denied (NVML: No Permission)",
        ),
        (FakeNvml(init_error="Unknown"), "NVML cannot be initialised on this host (NVML: Unknown)"),
    ],
)
def test_no_driver_is_one_typed_error(fake: FakeNvml, summary: str) -> None:
    with pytest.raises(nvml.NvmlUnavailableError) as caught:
        nvml.read_local_host(fake)
    assert caught.value.summary == summary
    assert caught.value.render().splitlines()[0] == f"Error: {summary}"
    assert fake.calls == ["nvmlInit"], "nothing was initialised, so nothing to shut down"


def test_a_lost_gpu_names_the_gpu_and_still_shuts_nvml_down() -> None:
    fake = FakeNvml(
        [fake_gpu(CATALOG["h100-80gb"]), fake_gpu(CATALOG["h100-80gb"], 1, errors={"memory": "GpuIsLost"})]
    )
    with pytest.raises(ProviderError, match=r"GPU 1: nvmlDeviceGetMemoryInfo: GPU is lost") as caught:
        nvml.read_local_host(fake)
    assert not isinstance(caught.value, nvml.NvmlUnavailableError)
    assert fake.calls[-1] == "nvmlShutdown" and not fake.initialised


def test_values_are_plain_frozen_dataclasses() -> None:
    host = nvml.read_local_host(FakeNvml([fake_gpu(CATALOG["b200"])]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.gpus[0].name = "x"

    def leaves(value: Any) -> list[Any]:
        if isinstance(value, dict):
            return [leaf for item in value.values() for leaf in leaves(item)]
        if isinstance(value, (list, tuple)):
            return [leaf for item in value for leaf in leaves(item)]
        return [value]

    assert {type(leaf) for leaf in leaves(dataclasses.asdict(host))} <= {str, int, float, bool, type(None)}


def test_importing_the_provider_does_not_load_pynvml() -> None:
    code = "import sys; import gpuplan.providers.nvml; print('pynvml' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_missing_bindings_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(nvml.NvmlUnavailableError, match="nvidia-ml-py") as caught:
        nvml.read_local_host()
    assert caught.value.reason == "pynvml missing"


# ------------------------------------------------------------------------------------ the JSON seam


def test_fake_description_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = CATALOG["l40s"]
    path = tmp_path / "host.json"
    path.write_text(
        json.dumps(
            {
                "driver_version": "580.105.08",
                "cuda_driver_version": 13000,
                "gpus": [
                    {
                        "name": model.name,
                        "memory_mib": model.memory_mib,
                        "compute_capability": f"{model.cc_major}.{model.cc_minor}",
                        "mig_capable": False,
                        "unsupported": ["power_usage"],
                    }
                ],
            }
        )
    )
    monkeypatch.setenv(nvml.FAKE_ENV, str(path))
    (gpu,) = nvml.read_local_host().gpus
    assert (gpu.name, gpu.memory_total_mib, gpu.compute_capability) == ("NVIDIA L40S", 46068, (8, 9))
    assert gpu.power_usage_w is None and gpu.power_limit_w is not None


def test_fake_description_can_play_a_host_without_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"init_error": "DriverNotLoaded"}))
    monkeypatch.setenv(nvml.FAKE_ENV, str(path))
    with pytest.raises(nvml.NvmlUnavailableError, match="Driver Not Loaded"):
        nvml.read_local_host()


@pytest.mark.parametrize(
    "content", ["{not json", json.dumps({"gpus": [{"name": "x"}]}), json.dumps({"init_error": "NoSuchError"})]
)
def test_malformed_fake_description_is_a_config_error(content: str, tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="malformed") as caught:
        fake_nvml.load_description(path)
    assert caught.value.where == str(path)


# ------------------------------------------------------------------------------------ the real pynvml


def test_fake_error_classes_match_pynvml() -> None:
    """Same class names, codes and messages as pynvml, so code written against the fake works on a host."""
    pynvml = pytest.importorskip("pynvml")
    real = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVMLError_")}
    assert set(real) == set(fake_nvml.ERROR_CLASSES)
    for name, cls in real.items():
        fake_error = fake_nvml.ERROR_CLASSES[name]()
        assert fake_error.value == cls().value, name
        assert isinstance(fake_nvml.NVMLError(cls().value), fake_nvml.ERROR_CLASSES[name])
        assert str(fake_error) == str(
            pynvml.NVMLError._errcode_to_string.get(fake_error.value, str(fake_error))
        )
    assert (fake_nvml.NVML_TEMPERATURE_GPU, fake_nvml.NVML_DEVICE_MIG_ENABLE) == (
        pynvml.NVML_TEMPERATURE_GPU,
        pynvml.NVML_DEVICE_MIG_ENABLE,
    )


def _real_host() -> nvml.LocalHost | nvml.NvmlUnavailableError:
    try:
        return nvml.read_local_host()
    except nvml.NvmlUnavailableError as exc:
        return exc


def test_real_nvml_on_a_host_without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    found = _real_host()
    if isinstance(found, nvml.LocalHost):
        pytest.skip(
            "this host has an NVIDIA driver; the no-driver answer of the real pynvml cannot be seen here"
        )
    assert found.summary.startswith(("No NVIDIA driver on this host", "No access to the NVIDIA driver"))
    assert "(NVML: " in found.summary and "\n" not in found.summary


def test_real_nvml_reads_the_gpus_of_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    found = _real_host()
    if isinstance(found, nvml.NvmlUnavailableError):
        pytest.skip(f"no usable NVIDIA GPU on this host: {found.summary}")
    assert found.driver_version and found.cuda_driver_version
    assert found.gpus, "a driver without GPUs"
    for gpu in found.gpus:
        assert gpu.name and gpu.uuid and gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.memory_total_mib and gpu.memory_total_mib > 1024
        assert gpu.compute_capability is not None and gpu.compute_capability[0] >= 3
