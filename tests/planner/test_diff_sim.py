"""Drift attribution from managedFields the simulated API server writes, with the real kubectl.

gpuplan's desired device plugin is applied with server-side apply as field manager ``gpuplan``; then a user
runs ``kubectl set image``. The live object read back through the provider must diff equal to desired before
the edit (server metadata and managedFields are not changes) and show the image as drift made by
``kubectl-set`` after it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpuplan.planner.diff import fields as diff
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.testing import kubeconfig, kubectl, lab_sim, sim_factory  # noqa: F401  (fixtures)

DESIRED = Path(__file__).parent / "test_diff_data" / "desired-device-plugin.yaml"
KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
IMAGE = "spec.template.spec.containers[name=nvidia-device-plugin].image"


def read_live(config: Path) -> dict[str, Any]:
    with KubernetesProvider(kubeconfig=str(config)) as provider:
        live = provider.read(KEY)
    assert live is not None
    return dict(live.manifest)


def test_kubectl_set_image_is_drift_attributed_to_kubectl_set(
    kubeconfig: Path,  # noqa: F811
    kubectl: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    desired = yaml.safe_load(DESIRED.read_text())
    manifest = tmp_path / "device-plugin.json"
    manifest.write_text(json.dumps(desired))
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}),
    )
    kubectl("apply", "--server-side", "--field-manager=gpuplan", "-f", str(manifest))

    applied = read_live(kubeconfig)
    assert applied["metadata"]["managedFields"][0]["manager"] == "gpuplan"
    assert applied != desired and "uid" in applied["metadata"]  # the server added its metadata
    assert diff.three_way(desired, desired, applied) == diff.ThreeWay((), (), ())

    kubectl(
        "-n",
        "gpu-operator",
        "set",
        "image",
        "daemonset/nvidia-device-plugin-daemonset",
        "nvidia-device-plugin=nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    drifted = read_live(kubeconfig)
    result = diff.three_way(desired, desired, drifted)
    assert result.intent == ()
    assert [(c.path, c.before, c.after, c.managers) for c in result.drift] == [
        (
            IMAGE,
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
            "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
            ("kubectl-set",),
        )
    ]
    assert [(c.path, c.after) for c in result.live_vs_desired] == [
        (IMAGE, "nvcr.io/nvidia/k8s-device-plugin:v0.20.1")
    ]
