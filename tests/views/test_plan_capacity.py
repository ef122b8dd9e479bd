"""The plan's capacity lines per node pool (text and JSON), and a ConfigMap's YAML file shown as a line diff
rather than a string cut in the middle."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.state.model import StateFile
from gpuplan.views import plan_human, plan_json

HEADER = """apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: fleet}
spec:
  driver: {owner: external}
  toolkit: {owner: external}
  mig: {strategy: mixed}
  migManager: {owner: gpuplan}
"""
POOLS = """  nodePools:
    - {name: inference, nodeSelector: {pool: inference}, devicePlugin: {config: {timeSlicing: {replicas: 4}}}}
    - {name: training, nodeSelector: {pool: training}, mig: {config: all-1g.10gb}}
"""


UNWRAPPED = 10_000


def pooled(name: str, pool: str | None) -> dict[str, Any]:
    """An A100 node with 8 GPUs, as GFD labels it, in ``pool``."""
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver-version.full": "580.105.08",
        **({"pool": pool} if pool else {}),
    }
    status: dict[str, Any] = {
        "nodeInfo": {"containerRuntimeVersion": "containerd://2.1.3"},
        "allocatable": {},
        "runtimeHandlers": [{"name": "runc"}, {"name": "nvidia"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": status,
    }


NODES = [pooled("infer-a", "inference"), pooled("train-a", "training"), pooled("train-b", "training")]


def plan_document(spec_text: str, applied: str | None = None) -> dict[str, Any]:
    cluster = FakeKubernetes(nodes=NODES)
    state = None
    if applied is not None:
        objects = parse_spec(applied, filename="gpustack.yaml").desired_objects()
        records = [adopt.record_applied(obj, cluster.put(obj.manifest), serial=1) for obj in objects]
        state = StateFile.new().with_records(records).next_serial()
    spec = parse_spec(spec_text, filename="gpustack.yaml")
    return make_plan(spec, state, refresh.refresh(cluster, spec, state)).document()


def test_each_pool_shows_its_capacity_summed_over_its_nodes() -> None:
    document = plan_document(HEADER + POOLS)
    text = plan_human.render(document, width=UNWRAPPED)
    assert (
        "Node pools:\n  inference: 1 node (infer-a)\n    capacity: nvidia.com/gpu 8 -> 32 (time-slicing x4)\n"
    ) in text
    assert (
        "  training: 2 nodes (train-a, train-b)\n"
        "    capacity: nvidia.com/gpu 16 -> 0 (MIG all-1g.10gb)\n"
        "    capacity: nvidia.com/mig-1g.10gb 0 -> 112 (MIG all-1g.10gb)\n"
    ) in text
    [inference, *_] = json.loads(plan_json.render(document))["capacity"]
    assert inference == {
        "pool": "inference",
        "resource": "nvidia.com/gpu",
        "before": 1,
        "after": 4,
        "how": "time-slicing x4",
        "nodes": 1,
        "total": {"before": 8, "after": 32, "gpus": 8, "uncounted": []},
    }


def test_a_stack_wide_change_shows_on_the_nodes_of_no_pool() -> None:
    plain = HEADER.split("  mig:")[0]  # no mig-manager: no node label to write either
    text = plan_human.render(
        plan_document(plain + "  devicePlugin: {config: {mps: {replicas: 2}}}\n"), width=UNWRAPPED
    )
    assert "\nCapacity:\n  (no pool): capacity: nvidia.com/gpu 24 -> 48 (MPS x2)\n\n" in text


def test_a_sharing_change_shows_the_config_file_as_a_line_diff() -> None:
    eight = POOLS.replace("replicas: 4", "replicas: 8")
    document = plan_document(HEADER + eight, applied=HEADER + POOLS)
    [change] = [c for c in document["changes"] if c["kind"] == "ConfigMap" and c["action"] == "update"]
    assert [field["path"] for field in change["fields"]] == ["data.inference"]
    text = plan_human.render(document, width=UNWRAPPED)
    assert (
        "  ~ devicePlugin/ConfigMap/gpu-operator/nvidia-device-plugin-config\n"
        "      # the configuration changed\n"
        "      data.inference:\n"
        "            flags:\n"
        "              migStrategy: mixed\n"
        "            sharing:\n"
        "              timeSlicing:\n"
        "                failRequestsGreaterThanOne: false\n"
        "                renameByDefault: false\n"
        "                resources:\n"
        "                - name: nvidia.com/gpu\n"
        "          -       replicas: 4\n"
        "          +       replicas: 8\n"
        "            version: v1\n"
    ) in text
    assert " ... " not in text.split("data.inference:")[1].split("\n\n")[0]


def test_a_long_text_shows_the_lines_around_each_change() -> None:
    before = "".join(f"line {n}\n" for n in range(60))
    after = before.replace("line 30\n", "line thirty\n")
    assert plan_human.text_diff(before, after, indent="") == [
        "  ...",
        "  line 27",
        "  line 28",
        "  line 29",
        "- line 30",
        "+ line thirty",
        "  line 31",
        "  line 32",
        "  line 33",
        "  ...",
    ]
