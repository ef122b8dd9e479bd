"""Objects the simulator tests create: a DaemonSet around a pod spec, as `kubectl apply` would send it."""

from __future__ import annotations

from typing import Any

PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"


def daemonset(
    pod_spec: dict[str, Any], *, name: str = "plugin", namespace: str = "kube-system"
) -> dict[str, Any]:
    """A DaemonSet ``name`` whose pods (label ``app: <name>``) have ``pod_spec``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


def static_plugin(**pod_spec: Any) -> dict[str, Any]:
    """A device plugin that tolerates every taint: it advertises ``nvidia.com/gpu`` once Ready."""
    return daemonset(
        {
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "p", "image": PLUGIN_IMAGE}],
            **pod_spec,
        }
    )
