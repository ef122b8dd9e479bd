"""API-server defaulting in the store: each default, explicit values kept, re-defaulting on update, patch and
apply, no generation bump for a write that only leaves defaults out, managedFields as a real server records
them, pod admission (priority, default tolerations), Service allocations, and the planner's view of a
defaulted object (gpuplan's rendered lab objects compare equal to what the store holds)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff import normalize
from gpuplan.planner.spec.model import parse_spec
from gpuplan.sim.api import defaults, managed, patch, registry, store
from gpuplan.sim.api.registry import ResourceType

REG = registry.Registry.builtin()


def kind(name: str) -> ResourceType:
    return next(rt for rt in registry.BUILTIN if rt.kind == name)


PODS, SERVICES, DAEMONSETS = kind("Pod"), kind("Service"), kind("DaemonSet")
NAMESPACES = kind("Namespace")
TPL = ("spec", "template", "spec")
CTR = TPL + ("containers", 0)
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def container() -> dict[str, Any]:
    return {
        "name": "main",
        "image": IMAGE,
        "ports": [{"name": "metrics", "containerPort": 2112}],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "livenessProbe": {"httpGet": {"port": 2112}},
    }


def pod_spec() -> dict[str, Any]:
    return {
        "containers": [container()],
        "volumes": [
            {"name": "plugins", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
            {"name": "config", "configMap": {"name": "cfg"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
            {"name": "scratch"},
        ],
    }


def base(kind_name: str) -> dict[str, Any]:
    """A minimal valid object of each kind, as a client that relies on the server's defaults sends it."""
    workload = {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec()},
    }
    objects: dict[str, dict[str, Any]] = {
        "DaemonSet": {"metadata": {"name": "x"}, "spec": workload},
        "Deployment": {"metadata": {"name": "x"}, "spec": workload},
        "Pod": {"metadata": {"name": "x"}, "spec": pod_spec()},
        "Service": {"metadata": {"name": "x"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 9400}]}},
        "Secret": {"metadata": {"name": "x"}, "data": {"a": "Yg=="}},
        "Namespace": {"metadata": {"name": "x"}},
    }
    copied: dict[str, Any] = json.loads(json.dumps(objects[kind_name]))
    return copied


def at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def put_at(obj: Any, path: tuple[str | int, ...], value: Any) -> None:
    for step in path[:-1]:
        obj = obj.setdefault(step, {}) if isinstance(obj, dict) else obj[step]
    obj[path[-1]] = value


# (kind, path, the server's default, a value a client may set instead: None where only the default is valid)
DEFAULTS: list[tuple[str, tuple[str | int, ...], Any, Any]] = [
    ("DaemonSet", ("spec", "revisionHistoryLimit"), 10, 3),
    ("DaemonSet", ("spec", "updateStrategy", "type"), "RollingUpdate", "OnDelete"),
    ("DaemonSet", ("spec", "updateStrategy", "rollingUpdate", "maxUnavailable"), 1, "25%"),
    ("DaemonSet", ("spec", "updateStrategy", "rollingUpdate", "maxSurge"), 0, "10%"),
    ("DaemonSet", TPL + ("restartPolicy",), "Always", None),
    ("DaemonSet", TPL + ("dnsPolicy",), "ClusterFirst", "ClusterFirstWithHostNet"),
    ("DaemonSet", TPL + ("terminationGracePeriodSeconds",), 30, 5),
    ("DaemonSet", TPL + ("schedulerName",), "default-scheduler", "gpu-scheduler"),
    ("DaemonSet", TPL + ("securityContext",), {}, {"runAsUser": 0}),
    ("DaemonSet", CTR + ("terminationMessagePath",), "/dev/termination-log", "/tmp/message"),
    ("DaemonSet", CTR + ("terminationMessagePolicy",), "File", "FallbackToLogsOnError"),
    ("DaemonSet", CTR + ("imagePullPolicy",), "IfNotPresent", "Always"),
    ("DaemonSet", CTR + ("resources",), {}, {"limits": {"cpu": "1"}}),
    ("DaemonSet", CTR + ("ports", 0, "protocol"), "TCP", "UDP"),
    ("DaemonSet", CTR + ("env", 0, "valueFrom", "fieldRef", "apiVersion"), "v1", None),
    ("DaemonSet", CTR + ("livenessProbe", "timeoutSeconds"), 1, 5),
    ("DaemonSet", CTR + ("livenessProbe", "periodSeconds"), 10, 30),
    ("DaemonSet", CTR + ("livenessProbe", "successThreshold"), 1, None),
    ("DaemonSet", CTR + ("livenessProbe", "failureThreshold"), 3, 6),
    ("DaemonSet", CTR + ("livenessProbe", "httpGet", "scheme"), "HTTP", "HTTPS"),
    ("DaemonSet", CTR + ("livenessProbe", "httpGet", "path"), "/", "/health"),
    ("DaemonSet", TPL + ("volumes", 0, "hostPath", "type"), "", "DirectoryOrCreate"),
    ("DaemonSet", TPL + ("volumes", 1, "configMap", "defaultMode"), 420, 493),
    ("DaemonSet", TPL + ("volumes", 2, "secret", "defaultMode"), 420, 256),
    ("DaemonSet", TPL + ("volumes", 3, "projected", "defaultMode"), 420, 256),
    (
        "DaemonSet",
        TPL + ("volumes", 3, "projected", "sources", 0, "serviceAccountToken", "expirationSeconds"),
        3600,
        7200,
    ),
    ("DaemonSet", TPL + ("volumes", 4, "emptyDir"), {}, {"medium": "Memory"}),
    ("Deployment", ("spec", "replicas"), 1, 3),
    ("Deployment", ("spec", "strategy", "rollingUpdate", "maxSurge"), "25%", 1),
    ("Deployment", ("spec", "progressDeadlineSeconds"), 600, 120),
    ("Pod", ("spec", "restartPolicy"), "Always", "Never"),
    ("Pod", ("spec", "enableServiceLinks"), True, False),
    ("Pod", ("spec", "containers", 0, "imagePullPolicy"), "IfNotPresent", "Never"),
    ("Service", ("spec", "type"), "ClusterIP", "NodePort"),
    ("Service", ("spec", "sessionAffinity"), "None", "ClientIP"),
    ("Service", ("spec", "ports", 0, "protocol"), "TCP", "UDP"),
    ("Service", ("spec", "ports", 0, "targetPort"), 9400, "metrics"),
    ("Service", ("spec", "internalTrafficPolicy"), "Cluster", "Local"),
    ("Service", ("spec", "ipFamilyPolicy"), "SingleStack", "PreferDualStack"),
    ("Service", ("spec", "ipFamilies"), ["IPv4"], None),
    ("Secret", ("type",), "Opaque", "example.com/custom"),
    ("Namespace", ("status", "phase"), "Active", None),
]
IDS = [f"{k}:{'.'.join(map(str, p))}" for k, p, _, _ in DEFAULTS]


@pytest.mark.parametrize(("kind_name", "path", "default", "explicit"), DEFAULTS, ids=IDS)
def test_a_created_object_carries_the_default(
    s: store.Store, kind_name: str, path: tuple[str | int, ...], default: Any, explicit: Any
) -> None:
    created = s.create(kind(kind_name), base(kind_name), manager="kubectl-create")
    assert at(created, path) == default
    assert at(s.get(kind(kind_name), "default", "x"), path) == default


@pytest.mark.parametrize(
    ("kind_name", "path", "default", "explicit"),
    [case for case in DEFAULTS if case[3] is not None],
    ids=[i for i, case in zip(IDS, DEFAULTS) if case[3] is not None],
)
def test_a_value_the_client_sets_is_kept(
    s: store.Store, kind_name: str, path: tuple[str | int, ...], default: Any, explicit: Any
) -> None:
    body = base(kind_name)
    put_at(body, path, explicit)
    assert at(s.create(kind(kind_name), body, manager="kubectl-create"), path) == explicit


def test_on_delete_strategy_gets_no_rolling_update(s: store.Store) -> None:
    body = base("DaemonSet")
    body["spec"]["updateStrategy"] = {"type": "OnDelete"}
    assert s.create(DAEMONSETS, body, manager="m")["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_only_pods_get_enable_service_links_and_requests_from_limits(s: store.Store) -> None:
    limits = {"cpu": "500m", "memory": "64Mi", "nvidia.com/gpu": "1"}
    ds_body, pod_body = base("DaemonSet"), base("Pod")
    for spec in (ds_body["spec"]["template"]["spec"], pod_body["spec"]):
        spec["containers"][0]["resources"] = {"limits": dict(limits), "requests": {"cpu": "100m"}}
    template = s.create(DAEMONSETS, ds_body, manager="m")["spec"]["template"]["spec"]
    pod = s.create(PODS, pod_body, manager="m")["spec"]
    assert "enableServiceLinks" not in template and pod["enableServiceLinks"] is True
    assert template["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    assert pod["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "64Mi",
        "nvidia.com/gpu": "1",
    }


def test_host_network_pod_ports_get_host_ports(s: store.Store) -> None:
    body = base("Pod")
    body["spec"]["hostNetwork"] = True
    assert s.create(PODS, body, manager="m")["spec"]["containers"][0]["ports"][0]["hostPort"] == 2112


def test_service_account_alias_follows_the_name(s: store.Store) -> None:
    body = base("DaemonSet")
    body["spec"]["template"]["spec"]["serviceAccountName"] = "nvidia-device-plugin"
    spec = s.create(DAEMONSETS, body, manager="m")["spec"]["template"]["spec"]
    assert spec["serviceAccount"] == spec["serviceAccountName"] == "nvidia-device-plugin"


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("localhost:5000/busybox", "Always"),
        ("localhost:5000/busybox:1.36", "IfNotPresent"),
        ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
        ("busybox:latest@sha256:" + "a" * 64, "Always"),
    ],
)
def test_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert defaults.pull_policy(image) == policy


def test_namespace_finalizer_is_added_to_the_clients_and_kept_on_update(s: store.Store) -> None:
    created = s.create(
        NAMESPACES,
        {
            "metadata": {"name": "gpu-operator", "labels": {"kubernetes.io/metadata.name": "forged"}},
            "spec": {"finalizers": ["example.com/x"]},
        },
        manager="m",
    )
    assert created["spec"]["finalizers"] == ["example.com/x", "kubernetes"]
    assert created["metadata"]["labels"]["kubernetes.io/metadata.name"] == "gpu-operator"
    updated = s.update(
        NAMESPACES,
        {"metadata": {"name": "gpu-operator", "labels": {"team": "gpu"}}},
        namespace=None,
        name="gpu-operator",
        manager="m",
    )
    assert updated["spec"]["finalizers"] == ["example.com/x", "kubernetes"]
    assert updated["metadata"]["labels"] == {"team": "gpu", "kubernetes.io/metadata.name": "gpu-operator"}


def test_secret_string_data_and_type_on_update(s: store.Store) -> None:
    secrets = kind("Secret")
    s.create(secrets, base("Secret"), manager="m")
    updated = s.update(
        secrets,
        {"metadata": {"name": "x"}, "stringData": {"token": "abc"}},
        namespace="default",
        name="x",
        manager="m",
    )
    assert updated["type"] == "Opaque" and updated["data"] == {"token": "YWJj"}


# --------------------------------------------------------------------- update, patch and apply re-default


def ds_manifest() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", **base("DaemonSet")}


def test_resending_the_manifest_without_defaults_is_a_no_op(s: store.Store) -> None:
    created = s.create(DAEMONSETS, ds_manifest(), manager="kubectl")
    # The same manager: another one would take the template-generation annotation the manifest leaves out
    # (the field manager sees it decoded as 0), a real change of managedFields.
    again = s.update(DAEMONSETS, ds_manifest(), namespace="default", name="x", manager="kubectl")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == 1 and again == created


def test_reapplying_the_same_manifest_server_side_is_a_no_op(s: store.Store) -> None:
    first = s.patch(DAEMONSETS, "default", "x", json.dumps(ds_manifest()), patch.APPLY, manager="gpuplan")
    second = s.patch(DAEMONSETS, "default", "x", json.dumps(ds_manifest()), patch.APPLY, manager="gpuplan")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == 1
    assert second["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"


def test_a_patch_that_removes_a_default_gets_it_back_without_a_new_version(s: store.Store) -> None:
    created = s.create(DAEMONSETS, ds_manifest(), manager="m")
    for body, patch_type in (
        ({"spec": {"revisionHistoryLimit": None}}, patch.MERGE),
        ([{"op": "remove", "path": "/spec/template/spec/dnsPolicy"}], patch.JSON_PATCH),
        (
            {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "main", "terminationMessagePath": None}]}}
                }
            },
            patch.STRATEGIC,
        ),
    ):
        patched = s.patch(DAEMONSETS, "default", "x", json.dumps(body), patch_type, manager="kubectl-patch")
        assert patched == created, patch_type


def test_a_spec_change_bumps_the_generation_once_and_keeps_the_defaults(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_manifest(), manager="m")
    changed = ds_manifest()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:latest"
    updated = s.update(DAEMONSETS, changed, namespace="default", name="x", manager="m")
    assert updated["metadata"]["generation"] == 2
    main = updated["spec"]["template"]["spec"]["containers"][0]
    # the new image is :latest, but the policy is only defaulted where it is missing: a PUT without it gets
    # the default of its own image, as a real server does
    assert (main["image"], main["imagePullPolicy"]) == ("nvcr.io/nvidia/k8s-device-plugin:latest", "Always")


def test_an_applied_field_that_is_given_up_falls_back_to_its_default(s: store.Store) -> None:
    manifest = ds_manifest()
    manifest["spec"]["revisionHistoryLimit"] = 3
    s.patch(DAEMONSETS, "default", "x", json.dumps(manifest), patch.APPLY, manager="gpuplan")
    reapplied = s.patch(DAEMONSETS, "default", "x", json.dumps(ds_manifest()), patch.APPLY, manager="gpuplan")
    assert reapplied["spec"]["revisionHistoryLimit"] == 10


def test_a_status_write_is_not_defaulted(s: store.Store) -> None:
    created = s.create(DAEMONSETS, ds_manifest(), manager="m")
    body = {**ds_manifest(), "status": {"numberReady": 1}}
    written = s.update(
        DAEMONSETS, body, namespace="default", name="x", manager="ds-controller", subresource="status"
    )
    assert written["status"] == {"numberReady": 1}  # no zeroed counters filled in
    assert written["spec"] == created["spec"]


# ------------------------------------------------------------------------------------------- managedFields


def owned(obj: dict[str, Any], manager: str) -> set[managed.Path]:
    entry = next(e for e in obj["metadata"]["managedFields"] if e["manager"] == manager)
    return managed.decode(entry["fieldsV1"])


def test_an_update_create_owns_the_defaulted_fields_as_a_real_server_records_them(s: store.Store) -> None:
    """kubectl create's managedFields on a real cluster list f:dnsPolicy, f:terminationMessagePath ...: the
    request is defaulted when decoded, before field management."""
    fields = owned(s.create(DAEMONSETS, ds_manifest(), manager="kubectl-create"), "kubectl-create")
    template = ("f:spec", "f:template", "f:spec")
    main = template + ("f:containers", 'k:{"name":"main"}')
    assert {
        ("f:spec", "f:revisionHistoryLimit"),
        ("f:spec", "f:updateStrategy", "f:type"),
        ("f:spec", "f:updateStrategy", "f:rollingUpdate", "f:maxSurge"),
        template + ("f:dnsPolicy",),
        template + ("f:securityContext",),
        main + ("f:terminationMessagePath",),
        main + ("f:imagePullPolicy",),
    } <= fields
    assert not any(path[0] == "f:status" for path in fields)


def test_admission_and_allocated_fields_belong_to_no_manager(s: store.Store) -> None:
    pod = s.create(PODS, base("Pod"), manager="kubectl-run")
    pod_fields = owned(pod, "kubectl-run")
    assert ("f:spec", "f:enableServiceLinks") in pod_fields
    assert (
        not {("f:spec", "f:priority"), ("f:spec", "f:preemptionPolicy"), ("f:spec", "f:tolerations")}
        & pod_fields
    )
    service_fields = owned(s.create(SERVICES, base("Service"), manager="kubectl-create"), "kubectl-create")
    assert {
        ("f:spec", "f:type"),
        ("f:spec", "f:sessionAffinity"),
        ("f:spec", "f:internalTrafficPolicy"),
    } <= service_fields
    assert (
        not {
            ("f:spec", "f:clusterIP"),
            ("f:spec", "f:clusterIPs"),
            ("f:spec", "f:ipFamilies"),
            ("f:spec", "f:ipFamilyPolicy"),
        }
        & service_fields
    )


def test_a_server_side_apply_owns_exactly_the_applied_fields(s: store.Store) -> None:
    applied = s.patch(DAEMONSETS, "default", "x", json.dumps(ds_manifest()), patch.APPLY, manager="gpuplan")
    assert owned(applied, "gpuplan") == set(managed.leaves(ds_manifest(), "main"))
    assert applied["spec"]["revisionHistoryLimit"] == 10


def test_a_write_without_the_defaults_leaves_their_owner_alone(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_manifest(), manager="kubectl-create")
    changed = ds_manifest()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.20.2"
    updated = s.update(DAEMONSETS, changed, namespace="default", name="x", manager="kubectl-edit")
    main = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"main"}')
    # The manifest has no template-generation annotation: the field manager sees the request's decoded
    # value (0) against the stored 1, so the writer owns it too (not a default: the strategy's field).
    generation = ("f:metadata", "f:annotations", "f:deprecated.daemonset.template.generation")
    assert owned(updated, "kubectl-edit") == {main + ("f:image",), generation}
    assert main + ("f:terminationMessagePath",) in owned(updated, "kubectl-create")


# ---------------------------------------------------------------------------------------- pod admission


@pytest.mark.parametrize(
    ("class_name", "priority"),
    [("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000), (None, 0)],
)
def test_pod_priority_comes_from_its_class(s: store.Store, class_name: str | None, priority: int) -> None:
    body = base("Pod")
    if class_name:
        body["spec"]["priorityClassName"] = class_name
    spec = s.create(PODS, body, manager="m")["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (priority, "PreemptLowerPriority")


def test_an_unknown_priority_class_or_a_forged_priority_is_forbidden(s: store.Store) -> None:
    body = base("Pod")
    body["spec"]["priorityClassName"] = "gpu-critical"
    with pytest.raises(store.ApiError) as unknown:
        s.create(PODS, body, manager="m")
    assert (unknown.value.code, unknown.value.message) == (
        403,
        'pods "x" is forbidden: no PriorityClass with name gpu-critical was found',
    )
    body = base("Pod")
    body["spec"].update(priorityClassName="system-node-critical", priority=7)
    with pytest.raises(store.ApiError) as forged:
        s.create(PODS, body, manager="m")
    assert (
        forged.value.code == 403
        and "the integer value of priority (7) must not be provided" in forged.value.message
    )


def test_an_update_without_priority_keeps_it(s: store.Store) -> None:
    body = base("Pod")
    body["spec"]["priorityClassName"] = "system-node-critical"
    created = s.create(PODS, body, manager="m")
    # the stored spec (admission's service account volume included), less what the Priority plugin set
    spec = {k: v for k, v in created["spec"].items() if k not in ("priority", "preemptionPolicy")}
    updated = s.update(PODS, {**body, "spec": spec}, namespace="default", name="x", manager="m")
    assert updated["spec"]["priority"] == 2000001000
    assert updated["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_pods_get_the_default_not_ready_and_unreachable_tolerations(s: store.Store) -> None:
    tolerations = s.create(PODS, base("Pod"), manager="m")["spec"]["tolerations"]
    assert tolerations == [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]


@pytest.mark.parametrize(
    ("own", "added"),
    [
        (
            [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
            ["node.kubernetes.io/unreachable"],
        ),
        ([{"operator": "Exists"}], []),  # tolerates every taint
        (
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"],
        ),
    ],
)
def test_default_tolerations_only_where_the_pod_has_none(
    s: store.Store, own: list[dict[str, Any]], added: list[str]
) -> None:
    body = base("Pod")
    body["spec"]["tolerations"] = own
    tolerations = s.create(PODS, body, manager="m")["spec"]["tolerations"]
    assert tolerations[: len(own)] == own
    assert [t["key"] for t in tolerations[len(own) :]] == added


def test_templates_get_no_admission_defaults(s: store.Store) -> None:
    body = base("DaemonSet")
    body["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    template = s.create(DAEMONSETS, body, manager="m")["spec"]["template"]["spec"]
    assert "priority" not in template and "tolerations" not in template


# ------------------------------------------------------------------------------------------- services


def test_service_allocations_survive_an_update_that_omits_them(s: store.Store) -> None:
    created = s.create(SERVICES, base("Service"), manager="m")["spec"]
    changed = base("Service")
    changed["spec"]["ports"][0]["name"] = "metrics"
    updated = s.update(SERVICES, changed, namespace="default", name="x", manager="m")["spec"]
    assert (updated["clusterIP"], updated["clusterIPs"]) == (created["clusterIP"], [created["clusterIP"]])
    assert (updated["ipFamilies"], updated["ipFamilyPolicy"]) == (["IPv4"], "SingleStack")


def test_node_ports_are_allocated_in_range_and_kept(s: store.Store) -> None:
    body = base("Service")
    body["spec"].update(type="NodePort", ports=[{"name": "a", "port": 80}, {"name": "b", "port": 81}])
    spec = s.create(SERVICES, body, manager="m")["spec"]
    ports = [p["nodePort"] for p in spec["ports"]]
    assert all(30000 <= p <= 32767 for p in ports) and len(set(ports)) == 2
    assert spec["externalTrafficPolicy"] == "Cluster"
    again = s.update(SERVICES, body, namespace="default", name="x", manager="m")["spec"]
    assert [p["nodePort"] for p in again["ports"]] == ports


def test_headless_and_external_name_services(s: store.Store) -> None:
    headless = base("Service")
    headless["metadata"]["name"] = "headless"
    headless["spec"].update(clusterIP="None")
    del headless["spec"]["selector"]
    spec = s.create(SERVICES, headless, manager="m")["spec"]
    assert (spec["clusterIPs"], spec["ipFamilyPolicy"]) == (["None"], "RequireDualStack")
    external = {"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com"}}
    spec = s.create(SERVICES, external, manager="m")["spec"]
    assert not {"clusterIP", "ipFamilies", "internalTrafficPolicy"} & set(spec)


# -------------------------------------------------------------------------------- the planner's view

LAB = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata: {name: lab}
spec:
  driver: {owner: external, version: "580.105.08"}
  toolkit: {owner: external}
  devicePlugin: {version: v0.20.1}
  gfd: {version: v0.20.1}
  dcgmExporter: {version: 4.6.0-4.8.3-distroless}
  validator: {}
"""
LAB_OBJECTS = {
    str(o.address): dict(o.manifest) for o in parse_spec(LAB, filename="gpustack.yaml").desired_objects()
}
DEVICE_PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"


@pytest.mark.parametrize("how", ["server-side apply", "create"])
@pytest.mark.parametrize("address", sorted(LAB_OBJECTS))
def test_the_planner_sees_a_defaulted_lab_object_as_desired(s: store.Store, address: str, how: str) -> None:
    """Rendered by gpuplan.modules, stored with the server's defaults, read back through diff.owned_view and
    normalize.normalize: no change (a difference would be a finding for the diff engine)."""
    desired = LAB_OBJECTS[address]
    rt = REG.for_kind(desired["apiVersion"], desired["kind"])
    assert rt is not None
    s.create(NAMESPACES, {"metadata": {"name": "gpu-operator"}}, manager="m")
    name, namespace = desired["metadata"]["name"], desired["metadata"].get("namespace")
    if how == "create":
        live = s.create(rt, desired, manager="gpuplan")
    else:
        live = s.patch(rt, namespace, name, json.dumps(desired), patch.APPLY, manager="gpuplan")
    assert diff.diff(desired, diff.owned_view(live, desired)) == ()
    assert diff.three_way(desired, desired, live).is_noop
    assert diff.diff(normalize.normalize(desired), normalize.normalize(live)) == ()


def test_the_lab_device_plugin_really_was_defaulted(s: store.Store) -> None:
    """The cross-check above is not vacuous: the stored device plugin differs from the rendered one."""
    desired = LAB_OBJECTS[DEVICE_PLUGIN]
    s.create(NAMESPACES, {"metadata": {"name": "gpu-operator"}}, manager="m")
    live = s.create(DAEMONSETS, desired, manager="gpuplan")
    added = {c.path for c in diff.diff(desired, normalize.strip_server_fields(live)) if c.op == "add"}
    assert {
        "spec.revisionHistoryLimit",
        "spec.template.spec.dnsPolicy",
        "spec.template.spec.containers[name=nvidia-device-plugin].terminationMessagePath",
    } <= added


@pytest.mark.parametrize("kind_name", ["DaemonSet", "Deployment", "Pod", "Service", "Secret", "Namespace"])
def test_owned_view_of_an_object_with_every_default_equals_what_was_sent(
    s: store.Store, kind_name: str
) -> None:
    """The objects of DEFAULTS (every default above, probes, volumes, env) through diff.owned_view."""
    sent = {"apiVersion": kind(kind_name).api_version, "kind": kind_name, **base(kind_name)}
    if kind_name == "Service":
        sent["spec"].update(type="NodePort", sessionAffinity="ClientIP")
    live = s.create(kind(kind_name), sent, manager="m")
    assert live != sent
    assert diff.diff(sent, diff.owned_view(live, sent)) == ()
