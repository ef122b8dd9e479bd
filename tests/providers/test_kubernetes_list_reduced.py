"""KubernetesProvider.list_reduced: one paginated list, each item reduced as its page arrives; what the drift
report streams the stack's pods with (public, instead of the provider's private list)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.providers import kubernetes
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl


def test_items_are_reduced_page_by_page_across_every_page(
    lab_sim: Simulator, kubeconfig: Path, kubectl: Kubectl, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(5):
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "data": {"key": "v"},
                    "metadata": {"name": f"page-{index}", "namespace": "default"},
                }
            ),
        )
    monkeypatch.setattr(kubernetes, "PAGE_SIZE", 2)
    seen: list[str] = []

    def name(item: dict[str, Any]) -> str:
        seen.append(item["metadata"]["name"])
        assert item["data"], "reduce receives the whole object"
        return f"{item['metadata']['namespace']}/{item['metadata']['name']}"

    with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
        provider.list_reduced("v1", "Node", lambda node: None)  # discovery of v1 out of the count below
        before = provider.request_count
        everything = provider.list_reduced("v1", "ConfigMap", name, label_selector=None)
        pages = provider.request_count - before
        assert [s.split("/")[1] for s in everything] == seen
        assert {f"default/page-{index}" for index in range(5)} <= set(everything)
        assert pages == (len(everything) + 1) // 2, "PAGE_SIZE items a page, every page read"
        labelled = provider.list_reduced(
            "v1",
            "Node",
            lambda node: node["metadata"]["name"],
            label_selector="kubernetes.io/hostname=lab-node",
        )
        assert labelled == ["lab-node"]
        named = provider.list_reduced(
            "v1", "ConfigMap", name, field_selector="metadata.name=page-3,metadata.namespace=default"
        )
        assert named == ["default/page-3"], "a field selector goes with every page's request"
        assert provider.list_reduced("example.com/v1", "Nothing", name) == [], (
            "an unserved kind lists nothing"
        )
