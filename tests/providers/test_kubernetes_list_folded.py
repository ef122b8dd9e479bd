"""LiveReader.list_folded: the health waiter's informers list pods and nodes folding each item as its page
arrives, so what a list holds at its peak is one page of whole objects, whatever the fleet's size."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Sequence
from typing import Any

import pytest

from gpuplan.planner.health.informer import Informer, fold_pod
from gpuplan.providers import kubernetes_live
from gpuplan.providers.kubernetes import Resource
from gpuplan.providers.kubernetes_live import LiveReader

PAGE = 50
"""Smaller than the real 500, so that both fleets below span several pages quickly."""


def served_pod(index: int) -> dict[str, Any]:
    """A pod with the bulk a served one has (managedFields, volumes, env), most of which a fold drops."""
    name = f"pod-{index:05d}"
    return {
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "uid": f"uid-{name}",
            "labels": {"app": "x"},
            "managedFields": [
                {"manager": f"m{n}", "fieldsV1": {"f:spec": {f"f:{n}": {}}}} for n in range(20)
            ],
        },
        "spec": {
            "nodeName": f"node-{index:05d}",
            "volumes": [{"name": f"v{n}", "hostPath": {"path": f"/run/{n}/{name}"}} for n in range(10)],
            "containers": [
                {
                    "name": "c",
                    "image": "i:1",
                    "env": [{"name": f"E{n}", "value": name * 3} for n in range(10)],
                }
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class PagedReader(LiveReader):
    """A LiveReader whose API server is ``pods`` pods served ``PAGE`` a page (no connection)."""

    def __init__(self, pods: int) -> None:
        super().__init__(kubeconfig="unused")
        self.pods = pods
        self.pages = 0
        self._discovered = {"v1": {"Pod": Resource("v1", "Pod", "pods", True)}}

    def _get(
        self, path: str, query: Sequence[tuple[str, str]] = (), *, what: str, expire_ok: bool = False
    ) -> bytes | None:
        start = int(dict(query).get("continue") or 0)
        end = min(self.pods, start + PAGE)
        self.pages += 1
        metadata = {"resourceVersion": "42", **({"continue": str(end)} if end < self.pods else {})}
        return json.dumps(
            {"metadata": metadata, "items": [served_pod(i) for i in range(start, end)]}
        ).encode()


def listing_peak(pods: int) -> tuple[int, int]:
    """The traced peak while an informer of ``pods`` pods syncs, less what its folded cache holds after; and
    the pages read."""
    reader = PagedReader(pods)
    informer = Informer(reader, "v1", "Pod", lambda pod: {"name": fold_pod(pod)["metadata"]["name"]})
    tracemalloc.start()
    try:
        informer.sync()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(informer.objects) == pods and informer.resource_version == "42"
    return peak - held, reader.pages


def test_an_informer_list_holds_one_page_of_whole_objects_whatever_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kubernetes_live, "PAGE_SIZE", PAGE)
    small, small_pages = listing_peak(2 * PAGE)
    large, large_pages = listing_peak(8 * PAGE)
    assert (small_pages, large_pages) == (2, 8)
    # four times the pages: the whole list kept before folding would peak about four times higher
    assert large < small * 1.5, f"peak beyond the folded cache: {small} bytes at 2 pages, {large} at 8"
