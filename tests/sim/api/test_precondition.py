"""Optimistic concurrency in patch bodies: a metadata.resourceVersion in a JSON merge patch, a strategic merge
patch or a server-side apply is a precondition (409 Conflict when it differs from the stored one), in the
store and through the HTTP API with the official Python client, as gpuplan's writer sends it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.rest import ApiException

from gpuplan.sim.api import patch
from gpuplan.sim.api.errors import MODIFIED_WHY
from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.server import ApiServer, write_kubeconfig
from gpuplan.sim.api.store import ApiError, Store

TOKEN = "precondition-token"
PATCH_TYPES = [patch.MERGE, patch.STRATEGIC, patch.APPLY]


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


def _config_maps(store: Store) -> Any:
    return store.registry.get("", "v1", "configmaps")


def _body(patch_type: str, rv: str, value: str) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"resourceVersion": rv}, "data": {"k": value}}
    if patch_type == patch.APPLY:
        body.update(apiVersion="v1", kind="ConfigMap")
        body["metadata"]["name"] = "cm"
    return body


def _stored(store: Store, patch_type: str) -> str:
    """A ConfigMap owned by the manager that patches it next (an apply by an Apply, the others by an
    Update)."""
    cms = _config_maps(store)
    if patch_type == patch.APPLY:
        created = store.patch(
            cms, "default", "cm", _body(patch.APPLY, "", "0"), patch.APPLY, manager="writer"
        )
    else:
        created = store.create(
            cms, {"metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "0"}}, manager="writer"
        )
    return str(created["metadata"]["resourceVersion"])


@pytest.mark.parametrize("patch_type", PATCH_TYPES)
def test_a_stale_resource_version_in_a_patch_body_is_409_and_changes_nothing(
    store: Store, patch_type: str
) -> None:
    rv = _stored(store, patch_type)
    cms = _config_maps(store)
    store.patch(cms, "default", "cm", {"data": {"other": "x"}}, patch.MERGE, manager="someone-else")
    with pytest.raises(ApiError) as caught:
        store.patch(cms, "default", "cm", _body(patch_type, rv, "1"), patch_type, manager="writer")
    assert caught.value.code == 409 and caught.value.reason == "Conflict"
    assert caught.value.message == f'Operation cannot be fulfilled on configmaps "cm": {MODIFIED_WHY}'
    assert store.get(cms, "default", "cm")["data"]["k"] == "0"


@pytest.mark.parametrize("patch_type", PATCH_TYPES)
def test_the_stored_resource_version_in_a_patch_body_lets_it_proceed(store: Store, patch_type: str) -> None:
    rv = _stored(store, patch_type)
    cms = _config_maps(store)
    patched = store.patch(cms, "default", "cm", _body(patch_type, rv, "1"), patch_type, manager="writer")
    assert patched["data"]["k"] == "1"
    assert int(patched["metadata"]["resourceVersion"]) > int(rv)


def test_apply_field_conflicts_are_reported_before_the_resource_version(store: Store) -> None:
    """As the real patcher: the field manager merges (and refuses) first, the update checks the version."""
    rv = _stored(store, patch.APPLY)
    cms = _config_maps(store)
    store.patch(cms, "default", "cm", {"data": {"k": "theirs"}}, patch.MERGE, manager="someone-else")
    with pytest.raises(ApiError) as caught:
        store.patch(cms, "default", "cm", _body(patch.APPLY, rv, "mine"), patch.APPLY, manager="writer")
    assert caught.value.code == 409 and caught.value.message.startswith("Apply failed with 1 conflict")


# ---------------------------------------------------------------------- through the HTTP API


@pytest.fixture
def core(store: Store, tmp_path: Path) -> Iterator[k8s.CoreV1Api]:
    server = ApiServer(store, token=TOKEN)
    server.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, TOKEN, server.ca_pem)
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield k8s.CoreV1Api(api_client)
    finally:
        api_client.close()
        api_client.rest_client.pool_manager.clear()
        server.stop()


def _server_side_apply(core: k8s.CoreV1Api, rv: str, value: str) -> Any:
    return core.patch_namespaced_config_map(
        "cm", "default", _body(patch.APPLY, rv, value), field_manager="gpuplan", _content_type=patch.APPLY
    )


def test_server_side_apply_with_the_plans_resource_version_over_http(core: k8s.CoreV1Api) -> None:
    created = core.patch_namespaced_config_map(
        "cm", "default", _body(patch.APPLY, "", "0"), field_manager="gpuplan", _content_type=patch.APPLY
    )
    planned = created.metadata.resource_version
    applied = _server_side_apply(core, planned, "1")
    assert applied.data == {"k": "1"}

    core.patch_namespaced_config_map("cm", "default", {"metadata": {"labels": {"edited": "by-hand"}}})
    with pytest.raises(ApiException) as caught:
        _server_side_apply(core, applied.metadata.resource_version, "2")
    assert caught.value.status == 409
    assert MODIFIED_WHY in caught.value.body and '"reason":"Conflict"' in caught.value.body
    assert core.read_namespaced_config_map("cm", "default").data == {"k": "1"}


def test_merge_patch_with_a_stale_resource_version_over_http(core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "0"}})
    stale = created.metadata.resource_version
    core.patch_namespaced_config_map("cm", "default", {"data": {"k": "1"}})
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_config_map(
            "cm",
            "default",
            {"metadata": {"resourceVersion": stale}, "data": {"k": "2"}},
            _content_type=patch.MERGE,
        )
    assert caught.value.status == 409 and MODIFIED_WHY in caught.value.body
