"""Node pools by GPU model on a mixed fleet, on the built-in control plane and on a real one (design §8.3):
pools that select ``nvidia.com/gpu.product`` hold their nodes before GFD has labelled them (the product of
NFD's PCI id) and after time-slicing renamed the product ``...-SHARED``, so the apply's gates pass on the
first try and the plan that follows has nothing to do."""

from __future__ import annotations

from typing import Any

import pytest
from lab_stack import lab_spec
from test_sharing_both_planes import GFD, PLUGIN, Story, sharing, story  # noqa: F401 (the fixture)

from gpuplan.sim.testing import ClusterFactory

pytestmark = pytest.mark.slow

A100, RTX = "NVIDIA-A100-SXM4-80GB", "NVIDIA-GeForce-RTX-3060"
FLEET_POOL = "node.kubernetes.io/pool"
"""fleet-N's own label naming each node's model group (gpuplan's pools do not select it)."""


def test_pools_by_gpu_model_keep_their_nodes_through_gfd_and_sharing(
    cluster_factory: ClusterFactory,
    story: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """fleet-24: the A100s time-slice x2 and the RTX 3060 x4 by product; the other models keep one device
    per GPU."""
    s: Story = story(cluster_factory("fleet-24"))
    pools = (
        f"[{{name: a100, nodeSelector: {{nvidia.com/gpu.product: {A100}}},"
        f" devicePlugin: {sharing('timeSlicing', 2)}}},"
        f" {{name: rtx, nodeSelector: {{nvidia.com/gpu.product: {RTX}}},"
        f" devicePlugin: {sharing('timeSlicing', 4)}}}]"
    )
    s.spec.write_text(lab_spec(devicePlugin=PLUGIN, gfd=GFD, nodePools=pools))
    group = {name: node["metadata"]["labels"][FLEET_POOL] for name, node in s.nodes().items()}
    assert not any("nvidia.com/gpu.product" in s.labels(name) for name in group), "GFD has not run yet"
    a100s = sorted(name for name, model in group.items() if model == "a100")
    assert len(a100s) == 5 and [name for name, model in group.items() if model == "rtx"] == ["rtx-1"]

    plan = s.json("plan")
    assert plan["pools"] == {"a100": a100s, "rtx": ["rtx-1"]}, "the pools by NFD's PCI ids, before GFD"
    assert plan["pool_identity"]["rtx-1"]["nvidia.com/gpu.product"] == RTX

    out = s.apply(s.spec.read_text())
    assert "Timeout" not in out and "moved from" not in out, out
    expected = {name: str(8 * {"a100": 2, "rtx": 4}.get(model, 1)) for name, model in group.items()}
    expected["rtx-1"] = "4"  # one GPU
    assert s.allocatable() == expected
    for name in (*a100s, "rtx-1"):
        assert s.labels(name)["nvidia.com/gpu.product"].endswith("-SHARED")
        assert s.labels(name)["nvidia.com/device-plugin.config"] == group[name]
    s.converged()
    assert s.json("plan")["pools"] == {"a100": a100s, "rtx": ["rtx-1"]}, "the renamed products stay in"
