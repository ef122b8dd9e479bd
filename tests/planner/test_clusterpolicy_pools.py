"""NVIDIADriver CRs in ``init --from-clusterpolicy``'s translation: the default one is the stack's driver,
each other one a ``spec.nodePools`` entry; one that cannot be a pool is listed, never dropped silently."""

from __future__ import annotations

from typing import Any

from gpuplan.planner.observe.clusterpolicy import translate
from gpuplan.planner.spec.model import Spec


def nvidia_driver(name: str, **spec: Any) -> dict[str, Any]:
    body = {"driverType": "gpu", "image": "nvcr.io/nvidia/driver", **spec}
    metadata = {"name": name}
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": metadata, "spec": body}


POLICY = {"driver": {"enabled": True, "useNvidiaDriverCRD": True}}


def test_each_non_default_nvidia_driver_with_a_node_selector_is_a_node_pool_of_a_valid_spec() -> None:
    drivers = [
        nvidia_driver("default", default=True, version="595.91.07"),
        nvidia_driver("volta", version="580.105.08", nodeSelector={"nvidia.com/gpu.family": "volta"}),
    ]
    got = translate(POLICY, name="stack", namespace="gpu-operator", drivers=drivers)
    pools = got.document["spec"]["nodePools"]
    assert [(pool["name"], pool["driver"]["version"]) for pool in pools] == [("volta", "580.105.08")]
    assert Spec.model_validate(got.document, by_alias=True, by_name=False).spec.node_pools[0].name == "volta"


def test_an_nvidia_driver_that_cannot_be_a_pool_is_listed_as_not_carried_over() -> None:
    drivers = [
        nvidia_driver("default", default=True, version="595.91.07"),
        nvidia_driver("no-selector", version="580.105.08"),
        nvidia_driver("x" * 41, version="580.105.08", nodeSelector={"nvidia.com/gpu.family": "volta"}),
    ]
    got = translate(POLICY, name="stack", namespace="gpu-operator", drivers=drivers)
    assert "nodePools" not in got.document["spec"]
    lost = [line for line in got.not_carried if line.startswith("NVIDIADriver ")]
    assert [line.split(":")[0] for line in lost] == ["NVIDIADriver no-selector", f"NVIDIADriver {'x' * 41}"]
    assert all("spec.nodePools" in line for line in lost)
