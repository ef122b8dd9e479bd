"""Store: create/get/update/delete semantics, errors and metadata, as a real kube-apiserver behaves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import registry, store

REG = registry.Registry.builtin()
PODS = registry.BUILTIN[2]
NODES = registry.BUILTIN[1]
CONFIGMAPS = registry.BUILTIN[3]
SECRETS = registry.BUILTIN[4]
DAEMONSETS = [rt for rt in registry.BUILTIN if rt.kind == "DaemonSet"][0]


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def daemonset(name: str = "ds", image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }


def pod(name: str = "p", node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_create_sets_server_metadata(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="kubectl-create")
    meta = created["metadata"]
    assert len(meta["uid"]) == 36
    assert int(meta["resourceVersion"]) == s.resource_version
    assert meta["generation"] == 1
    assert meta["creationTimestamp"].endswith("Z") and "T" in meta["creationTimestamp"]
    assert created["status"]["numberReady"] == 0


def test_generation_only_where_the_real_registry_tracks_it(s: store.Store) -> None:
    cm = s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    node = s.create(NODES, {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}}, manager="kubelet")
    namespace = s.get(registry.BUILTIN[0], None, "default")
    created_pod = s.create(PODS, pod(), manager="m")
    assert "generation" not in cm["metadata"] and "generation" not in node["metadata"]
    assert "generation" not in namespace["metadata"]
    assert created_pod["metadata"]["generation"] == 1


def test_seed_namespaces_exist(s: store.Store) -> None:
    names = [n["metadata"]["name"] for n in s.list(registry.BUILTIN[0]).items]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]


def test_get_missing_is_404_with_real_message(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.get(DAEMONSETS, "default", "nope")
    assert err.value.code == 404 and err.value.reason == "NotFound"
    assert err.value.message == 'daemonsets.apps "nope" not found'
    assert err.value.status()["details"] == {"name": "nope", "group": "apps", "kind": "daemonsets"}


def test_create_twice_is_409_already_exists(s: store.Store) -> None:
    s.create(PODS, pod(), manager="m")
    with pytest.raises(store.ApiError) as err:
        s.create(PODS, pod(), manager="m")
    assert (err.value.code, err.value.reason) == (409, "AlreadyExists")
    assert err.value.message == 'pods "p" already exists'


def test_create_in_missing_namespace_is_404(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.create(PODS, pod(), namespace="gpu-operator", manager="m")
    assert err.value.code == 404 and err.value.message == 'namespaces "gpu-operator" not found'


def test_generate_name_makes_a_unique_name(s: store.Store) -> None:
    first = s.create(PODS, {"metadata": {"generateName": "nvidia-"}, "spec": pod()["spec"]}, manager="m")
    second = s.create(PODS, {"metadata": {"generateName": "nvidia-"}, "spec": pod()["spec"]}, manager="m")
    assert first["metadata"]["name"].startswith("nvidia-") and len(first["metadata"]["name"]) == 12
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_missing_name_is_422_required(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.create(CONFIGMAPS, {"metadata": {}}, manager="m")
    assert err.value.code == 422
    cause = err.value.status()["details"]["causes"][0]
    assert cause == {
        "reason": "FieldValueRequired",
        "field": "metadata.name",
        "message": "Required value: name or generateName is required",
    }


def test_invalid_name_is_422_invalid(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.create(CONFIGMAPS, {"metadata": {"name": "Bad_Name"}}, manager="m")
    assert err.value.message.startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: '
        '"Bad_Name": a lowercase RFC 1123 subdomain'
    )
    assert err.value.status()["details"]["causes"][0]["reason"] == "FieldValueInvalid"


def test_kind_mismatch_is_400(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.create(PODS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, manager="m")
    assert err.value.code == 400 and err.value.reason == "BadRequest"


def test_update_with_stale_resource_version_is_409_conflict(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="m")
    s.update(DAEMONSETS, daemonset(image="x:2"), namespace="default", name="ds", manager="m2")
    stale = {**created, "metadata": {**created["metadata"], "labels": {"app": "ds", "x": "y"}}}
    with pytest.raises(store.ApiError) as err:
        s.update(DAEMONSETS, stale, namespace="default", name="ds", manager="m")
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert err.value.message == (
        'Operation cannot be fulfilled on daemonsets.apps "ds": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )


def test_update_without_resource_version_is_unconditional(s: store.Store) -> None:
    created = s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    s.update(
        CONFIGMAPS,
        {"metadata": {"name": "c"}, "data": {"a": "2"}},
        namespace="default",
        name="c",
        manager="m",
    )
    body = {"metadata": {"name": "c"}, "data": {"a": "3"}}
    updated = s.update(CONFIGMAPS, body, namespace="default", name="c", manager="m")
    assert updated["data"] == {"a": "3"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


def test_update_name_mismatch_is_400(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.update(CONFIGMAPS, {"metadata": {"name": "d"}}, namespace="default", name="c", manager="m")
    assert err.value.code == 400
    assert err.value.message == "the name of the object (d) does not match the name on the URL (c)"


def test_update_of_missing_object_is_404(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.update(CONFIGMAPS, {"metadata": {"name": "c"}}, namespace="default", name="c", manager="m")
    assert err.value.code == 404


def test_noop_update_keeps_resource_version(s: store.Store) -> None:
    created = s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    again = s.update(CONFIGMAPS, created, namespace="default", name="c", manager="m")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_generation_bumps_on_spec_change_only(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="m")
    relabelled = {**created, "metadata": {**created["metadata"], "labels": {"app": "ds", "tier": "gpu"}}}
    after_label = s.update(DAEMONSETS, relabelled, namespace="default", name="ds", manager="m")
    assert after_label["metadata"]["generation"] == 1
    changed = daemonset(image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1")
    after_spec = s.update(DAEMONSETS, changed, namespace="default", name="ds", manager="m")
    assert after_spec["metadata"]["generation"] == 2


def test_status_write_changes_only_status_and_keeps_generation(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="m")
    body = {
        **created,
        "spec": {**created["spec"], "minReadySeconds": 5},
        "status": {"numberReady": 3, "desiredNumberScheduled": 3},
    }
    updated = s.update(
        DAEMONSETS,
        body,
        namespace="default",
        name="ds",
        manager="kube-controller-manager",
        subresource="status",
    )
    assert updated["status"] == {"numberReady": 3, "desiredNumberScheduled": 3}
    assert "minReadySeconds" not in updated["spec"]
    assert updated["metadata"]["generation"] == 1


def test_main_write_keeps_stored_status(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="m")
    s.update(
        DAEMONSETS,
        {**created, "status": {"numberReady": 2}},
        namespace="default",
        name="ds",
        manager="c",
        subresource="status",
    )
    body = {**daemonset(image="x:2"), "status": {"numberReady": 99}}
    updated = s.update(DAEMONSETS, body, namespace="default", name="ds", manager="m")
    assert updated["status"] == {"numberReady": 2}
    assert updated["spec"]["template"]["spec"]["containers"][0]["image"] == "x:2"


def test_daemonset_selector_is_immutable(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="m")
    body = {
        **created,
        "spec": {
            **created["spec"],
            "selector": {"matchLabels": {"app": "other"}},
            "template": {**created["spec"]["template"], "metadata": {"labels": {"app": "other"}}},
        },
    }
    with pytest.raises(store.ApiError) as err:
        s.update(DAEMONSETS, body, namespace="default", name="ds", manager="m")
    assert err.value.code == 422
    assert err.value.message.startswith('DaemonSet.apps "ds" is invalid: spec.selector: Invalid value:')
    assert err.value.message.endswith("field is immutable")


def test_pod_spec_is_immutable_except_image(s: store.Store) -> None:
    created = s.create(PODS, pod(node="n1"), manager="m")
    container = {**created["spec"]["containers"][0], "image": "busybox:2"}
    new_image = {**created, "spec": {**created["spec"], "containers": [container]}}
    assert (
        s.update(PODS, new_image, namespace="default", name="p", manager="m")["spec"]["containers"][0][
            "image"
        ]
        == "busybox:2"
    )
    moved = {**created, "metadata": {"name": "p"}, "spec": {**created["spec"], "nodeName": "n2"}}
    with pytest.raises(store.ApiError) as err:
        s.update(PODS, moved, namespace="default", name="p", manager="m")
    assert err.value.code == 422
    assert err.value.status()["details"]["causes"][0]["reason"] == "FieldValueForbidden"


def test_immutable_configmap_refuses_data_changes(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": True}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.update(
            CONFIGMAPS,
            {"metadata": {"name": "c"}, "data": {"a": "2"}, "immutable": True},
            namespace="default",
            name="c",
            manager="m",
        )
    assert err.value.message == (
        'ConfigMap "c" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )


def test_secret_string_data_is_folded_into_data(s: store.Store) -> None:
    created = s.create(SECRETS, {"metadata": {"name": "s"}, "stringData": {"token": "abc"}}, manager="m")
    assert created["data"] == {"token": "YWJj"} and "stringData" not in created


def test_strict_field_validation_rejects_unknown_fields(s: store.Store) -> None:
    body = {"metadata": {"name": "c", "labelz": {}}, "data": {}, "extra": 1}
    with pytest.raises(store.ApiError) as err:
        s.create(CONFIGMAPS, body, manager="m", field_validation="Strict")
    assert err.value.code == 400
    assert (
        err.value.message == 'strict decoding error: unknown field "extra", unknown field "metadata.labelz"'
    )
    assert s.create(CONFIGMAPS, body, manager="m")["metadata"]["name"] == "c"


def test_pod_gets_pending_phase(s: store.Store) -> None:
    created = s.create(PODS, {**pod(), "status": {"phase": "Running"}}, manager="m")
    assert created["status"]["phase"] == "Pending"


def test_reads_are_copies(s: store.Store) -> None:
    created = s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    created["data"]["a"] = "changed"
    fetched = s.get(CONFIGMAPS, "default", "c")
    fetched["data"]["a"] = "changed too"
    assert s.get(CONFIGMAPS, "default", "c")["data"] == {"a": "1"}


def test_cluster_scoped_objects_ignore_namespace(s: store.Store) -> None:
    created = s.create(NODES, {"metadata": {"name": "n1", "namespace": "default"}}, manager="kubelet")
    assert "namespace" not in created["metadata"]
    assert s.get(NODES, None, "n1")["metadata"]["name"] == "n1"


def test_status_subresource_of_a_kind_without_one_is_404(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.update(
            CONFIGMAPS,
            {"metadata": {"name": "c"}, "status": {}},
            namespace="default",
            name="c",
            manager="m",
            subresource="status",
        )
    assert err.value.code == 404


def test_strict_field_validation_on_update(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.update(
            CONFIGMAPS,
            {"metadata": {"name": "c"}, "dta": {}},
            namespace="default",
            name="c",
            manager="m",
            field_validation="Strict",
        )
    assert err.value.message == 'strict decoding error: unknown field "dta"'


def test_system_namespaces_may_not_be_deleted(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.delete(registry.BUILTIN[0], None, "kube-system")
    assert (err.value.code, err.value.reason) == (403, "Forbidden")
    assert err.value.message == 'namespaces "kube-system" is forbidden: this namespace may not be deleted'


def test_secret_type_and_service_cluster_ip_defaults(s: store.Store) -> None:
    secret = s.create(SECRETS, {"metadata": {"name": "s"}}, manager="m")
    assert secret["type"] == "Opaque"
    services = registry.BUILTIN[5]
    svc = s.create(services, {"metadata": {"name": "dcgm"}, "spec": {"ports": [{"port": 9400}]}}, manager="m")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["clusterIP"].startswith("10.") and svc["spec"]["clusterIPs"] == [
        svc["spec"]["clusterIP"]
    ]


def test_api_error_status_body() -> None:
    err = store.ApiError(429, "TooManyRequests", "slow down", retry_after=3)
    assert err.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "slow down",
        "reason": "TooManyRequests",
        "code": 429,
        "details": {"retryAfterSeconds": 3},
    }


def test_a_create_without_an_answer_stores_the_object_and_returns_nothing(s: store.Store) -> None:
    assert s.create(CONFIGMAPS, {"metadata": {"name": "quiet"}}, manager="", answer=False) == {}
    assert s.get(CONFIGMAPS, "default", "quiet")["metadata"]["resourceVersion"] == str(s.resource_version)


def test_an_owned_create_stores_the_body_itself(s: store.Store) -> None:
    body = {"metadata": {"name": "mine"}, "data": {"k": "v"}}
    s.create(CONFIGMAPS, body, manager="m", owned=True)
    assert s._table.get(CONFIGMAPS, "default", "mine") is body
    assert s.get(CONFIGMAPS, "default", "mine")["data"] == {"k": "v"}


def test_uids_are_distinct_rfc_4122_version_4_strings(s: store.Store) -> None:
    import uuid

    created = [s.create(CONFIGMAPS, {"metadata": {"name": f"u{n}"}}, manager="m") for n in range(200)]
    uids = [obj["metadata"]["uid"] for obj in created]
    assert len(set(uids)) == len(uids)
    for text in uids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_concurrent_writers_get_unique_increasing_versions(s: store.Store) -> None:
    import threading

    seen: list[int] = []
    s.subscribe(lambda e: seen.append(int(e.object["metadata"]["resourceVersion"])))
    errors: list[BaseException] = []

    def writer(prefix: str) -> None:
        try:
            for n in range(50):
                s.create(CONFIGMAPS, {"metadata": {"name": f"{prefix}-{n}"}}, manager=prefix)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert s.flush(timeout=10)
    assert len(seen) == 200 and seen == sorted(seen) and len(set(seen)) == 200
    assert len(s.list(CONFIGMAPS).items) == 200


def test_timestamps_are_rfc3339_utc_seconds_from_the_clock() -> None:
    from datetime import datetime, timedelta, timezone

    plus_two = timezone(timedelta(hours=2))
    clocked = store.Store(
        registry.Registry.builtin(), clock=lambda: datetime(2026, 1, 2, 5, 4, 5, 678, tzinfo=plus_two)
    )
    try:
        created = clocked.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
        assert created["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"
        assert created["metadata"]["managedFields"][0]["time"] == "2026-01-02T03:04:05Z"
    finally:
        clocked.close()


def test_invalid_label_value_is_422(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.create(CONFIGMAPS, {"metadata": {"name": "c", "labels": {"app": "not valid!"}}}, manager="m")
    assert err.value.code == 422
    assert err.value.message.startswith(
        'ConfigMap "c" is invalid: metadata.labels: Invalid value: "not valid!": '
        "a valid label must be an empty string"
    )


def test_invalid_label_key_and_annotation_key_are_422(s: store.Store) -> None:
    body = {"metadata": {"name": "c", "labels": {"Bad Prefix/x": "1"}, "annotations": {"-x": "y"}}}
    with pytest.raises(store.ApiError) as err:
        s.create(CONFIGMAPS, body, manager="m")
    fields = [c["field"] for c in err.value.status()["details"]["causes"]]
    assert fields == ["metadata.labels", "metadata.annotations"]


def test_gpu_feature_discovery_labels_are_valid(s: store.Store) -> None:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060",
        "nvidia.com/gpu.memory": "12288",
        "nvidia.com/cuda.driver-version.full": "580.105.08",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/mig.capable": "false",
    }
    created = s.create(NODES, {"metadata": {"name": "lab-node", "labels": labels}}, manager="kubelet")
    assert created["metadata"]["labels"] == labels


@pytest.mark.parametrize(
    "resources, qos",
    [
        ({}, "BestEffort"),
        ({"requests": {"cpu": "100m"}}, "Burstable"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        (
            {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}},
            "Burstable",
        ),
        ({"limits": {"nvidia.com/gpu": "1"}}, "BestEffort"),
    ],
)
def test_pod_qos_class(s: store.Store, resources: dict[str, Any], qos: str) -> None:
    body = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
    }
    assert s.create(PODS, body, manager="m")["status"]["qosClass"] == qos


def test_a_pods_qos_class_is_immutable(s: store.Store) -> None:
    """ValidatePodStatusUpdate: a status write may not change the class the server set at create (a kubelet
    that computes another one is refused, as a real API server refuses it)."""
    gpus = {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    created = s.create(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [gpus]}}, manager="m")
    status = {**created["status"], "qosClass": "Burstable"}
    with pytest.raises(store.ApiError) as refused:
        s.update(
            PODS, {**created, "status": status}, namespace="default", name="p", manager="kubelet",
            subresource="status",
        )  # fmt: skip
    assert refused.value.code == 422
    assert 'status.qosClass: Invalid value: "Burstable": field is immutable' in refused.value.message
    status = {**created["status"], "phase": "Running"}
    kept = s.update(
        PODS, {**created, "status": status}, namespace="default", name="p", manager="kubelet",
        subresource="status",
    )  # fmt: skip
    assert kept["status"]["qosClass"] == "BestEffort"
    # a status written without a class keeps the stored one (podStatusStrategy.PrepareForUpdate backfills it)
    bare = {key: value for key, value in kept["status"].items() if key != "qosClass"}
    backfilled = s.update(
        PODS, {**kept, "status": bare}, namespace="default", name="p", manager="kubelet", subresource="status"
    )
    assert backfilled["status"]["qosClass"] == "BestEffort"


def test_a_status_write_moves_no_index_entry_and_the_indexes_stay_right(
    s: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status write keeps the spec and the ownerReferences (one instance each): the pods-by-node and
    dependents indexes are not touched, and still answer for the pod and its owner."""
    from gpuplan.sim.api import selectors, table

    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid", "controller": True}
    pod = {
        "metadata": {"name": "p", "ownerReferences": [owner]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    }
    s.create(PODS, pod, manager="m")
    moves: list[tuple[str, bool]] = []
    real = table._index_member

    def counted(index: dict[str, set[Any]], name: str, member: Any, add: bool) -> None:
        moves.append((name, add))
        real(index, name, member, add)

    monkeypatch.setattr(table, "_index_member", counted)
    merge = "application/merge-patch+json"
    s.patch(
        PODS, "default", "p", {"status": {"phase": "Running"}}, merge, manager="kubelet", subresource="status"
    )
    assert moves == []
    s.patch(PODS, "default", "p", {"metadata": {"labels": {"a": "b"}}}, merge, manager="m")
    assert ("n1", True) in moves and ("ds-uid", True) in moves
    assert s._table.keys_for(PODS, selectors.parse_fields("spec.nodeName=n1", "Pod")) == [("default", "p")]
    assert s._table.dependents("ds-uid") == [(("", "pods"), ("default", "p"))]
