"""PriorityClasses and RuntimeClass admission through the real kubectl against the simulated cluster:
discovery lists priorityclasses (pc), `kubectl get pc` prints the real columns with the system classes, and a
pod naming a missing RuntimeClass is refused with the plugin's words."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator

pytestmark = pytest.mark.kubectl

POD = """
apiVersion: v1
kind: Pod
metadata: {name: cuda-probe, namespace: default}
spec:
  runtimeClassName: nvidia
  containers: [{name: c, image: nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04}]
"""


def test_kubectl_lists_the_system_priority_classes(lab_sim: Simulator, kubectl: Any) -> None:
    resources = kubectl("api-resources", "--api-group=scheduling.k8s.io", "--no-headers").stdout.split()
    assert resources[:5] == ["priorityclasses", "pc", "scheduling.k8s.io/v1", "false", "PriorityClass"]
    lines = kubectl("get", "pc").stdout.splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["system-node-critical"][1:3] == ["2000001000", "false"]
    assert rows["system-cluster-critical"][1:3] == ["2000000000", "false"]
    assert rows["system-node-critical"][-1] == "PreemptLowerPriority"


def test_kubectl_create_of_a_pod_with_a_missing_runtime_class_is_forbidden(
    lab_sim: Simulator, kubectl: Any
) -> None:
    refused = kubectl("create", "-f", "-", input=POD, check=False)
    assert refused.returncode != 0
    assert 'pods "cuda-probe" is forbidden: pod rejected: RuntimeClass "nvidia" not found' in refused.stderr
    kubectl(
        "create",
        "-f",
        "-",
        input="apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nvidia}\nhandler: nvidia\n",
    )
    created = kubectl("create", "-f", "-", input=POD)
    assert "pod/cuda-probe created" in created.stdout
