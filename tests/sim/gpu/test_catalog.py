"""The GPU catalog carries the NVML facts of design §6 and GFD's family mapping (facts §4)."""

from __future__ import annotations

import pytest

from gpuplan.sim.catalog import CATALOG, driver_support_error, gpu_family, sanitise_label_value

DESIGN_6 = {  # key: (NVML name, memory MiB, compute capability, MIG)
    "rtx-3060": ("NVIDIA GeForce RTX 3060", 12288, (8, 6), False),
    "t4": ("Tesla T4", 15360, (7, 5), False),
    "v100": ("Tesla V100-SXM2-32GB", 32768, (7, 0), False),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920, (8, 0), True),
    "l40s": ("NVIDIA L40S", 46068, (8, 9), False),
    "h100-80gb": ("NVIDIA H100 80GB HBM3", 81559, (9, 0), True),
    "h200": ("NVIDIA H200", 143771, (9, 0), True),
    "b200": ("NVIDIA B200", 183359, (10, 0), True),
}


def test_catalog_has_exactly_the_models_of_design_6() -> None:
    assert set(CATALOG) == set(DESIGN_6)


@pytest.mark.parametrize("key", sorted(DESIGN_6))
def test_each_model_carries_its_nvml_facts(key: str) -> None:
    name, memory, (major, minor), mig = DESIGN_6[key]
    model = CATALOG[key]
    assert (model.key, model.name, model.memory_mib, model.cc_major, model.cc_minor, model.mig_capable) == (
        key,
        name,
        memory,
        major,
        minor,
        mig,
    )
    assert model.pci_device_id.startswith("0x") and len(model.pci_device_id) == 6


def test_pci_ids_from_the_mig_parted_device_filters() -> None:
    assert CATALOG["a100-80gb"].pci_device_id == "0x20B2"
    assert CATALOG["h200"].pci_device_id == "0x2335"
    assert CATALOG["b200"].pci_device_id == "0x2901"
    assert CATALOG["h200"].pci_id == "10de:2335"


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((1, 3), "tesla"),
        ((2, 1), "fermi"),
        ((3, 7), "kepler"),
        ((5, 2), "maxwell"),
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 7), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((13, 0), "rubin"),
        ((4, 0), "undefined"),
        ((11, 0), "undefined"),
    ],
)
def test_family_mapping_is_gfds_get_arch_family(cc: tuple[int, int], family: str) -> None:
    assert gpu_family(*cc) == family


def test_catalog_families() -> None:
    assert {k: m.family for k, m in CATALOG.items()} == {
        "rtx-3060": "ampere",
        "t4": "turing",
        "v100": "volta",
        "a100-80gb": "ampere",
        "l40s": "ada-lovelace",
        "h100-80gb": "hopper",
        "h200": "hopper",
        "b200": "blackwell",
    }


def test_product_is_the_sanitised_nvml_name() -> None:
    assert CATALOG["h100-80gb"].product == "NVIDIA-H100-80GB-HBM3"
    assert CATALOG["rtx-3060"].product == "NVIDIA-GeForce-RTX-3060"
    assert sanitise_label_value("Tesla V100-SXM2-32GB (rev/a)") == "Tesla-V100-SXM2-32GB-reva"


def test_only_geforce_is_a_vga_device() -> None:
    assert {k for k, m in CATALOG.items() if m.pci_class == "0300"} == {"rtx-3060"}


@pytest.mark.parametrize(
    ("key", "driver", "supported"),
    [
        ("v100", "580.105.08", True),
        ("v100", "595.91.07", False),  # R580 is Volta's last branch
        ("b200", "570.133.20", True),
        ("b200", "570.124.06", False),
        ("b200", "550.163.01", False),
        ("h100-80gb", "595.91.07", True),
        ("a100-80gb", "535.274.02", True),
        ("t4", "610.57.04", True),
    ],
)
def test_driver_branch_against_architecture(key: str, driver: str, supported: bool) -> None:
    error = driver_support_error(CATALOG[key], driver)
    assert (error is None) == supported
    if error:
        assert f"not supported by the NVIDIA {driver} driver release" in error
        assert CATALOG[key].pci_id in error
