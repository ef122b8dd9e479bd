"""Owned-field diffs: normalisation, readable paths, keyed and ordered lists, replace detection.

The fixtures in test_diff_data/ are a device plugin DaemonSet as gpuplan renders it and as a real API server
returns it (defaults, status, server metadata, managedFields), written by hand.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff import normalize

DATA = Path(__file__).parent / "test_diff_data"
CONTAINER = "spec.template.spec.containers[name=nvidia-device-plugin]"


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


@pytest.fixture
def desired() -> dict[str, Any]:
    return load("desired-device-plugin.yaml")


@pytest.fixture
def live() -> dict[str, Any]:
    return load("live-device-plugin.yaml")


def test_live_object_equal_to_desired_plus_server_defaults_diffs_equal(
    desired: dict[str, Any], live: dict[str, Any]
) -> None:
    """Status, server metadata, managedFields, defaults and the server's quantity spelling are not changes."""
    assert live != desired
    assert diff.diff(diff.owned_view(live, desired), desired) == ()


def test_owned_view_drops_server_noise_and_keeps_template_spelling(
    desired: dict[str, Any], live: dict[str, Any]
) -> None:
    view = diff.owned_view(live, desired)
    assert "status" not in view
    assert set(view["metadata"]) == {"name", "namespace", "labels"}
    pod = view["spec"]["template"]["spec"]
    assert "dnsPolicy" not in pod and "terminationGracePeriodSeconds" not in pod
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == "0.1"  # live says 100m: same quantity
    assert pod["volumes"][0]["hostPath"] == {"path": "/var/lib/kubelet/device-plugins"}


def test_a_changed_quantity_is_still_a_change(desired: dict[str, Any], live: dict[str, Any]) -> None:
    live["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"
    changes = diff.diff(diff.owned_view(live, desired), desired)
    assert [(c.path, c.before, c.after) for c in changes] == [
        (f"{CONTAINER}.resources.requests.cpu", "200m", "0.1")
    ]


def test_changes_have_readable_paths_with_merge_keys_and_quoted_keys(desired: dict[str, Any]) -> None:
    after = copy.deepcopy(desired)
    after["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.21.0"
    after["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.deploy.device-plugin"] = "false"
    after["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][1]["readOnly"] = True
    after["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "false"
    paths = {c.path: (c.before, c.after) for c in diff.diff(desired, after)}
    assert paths == {
        f"{CONTAINER}.image": (
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
            "nvcr.io/nvidia/k8s-device-plugin:v0.21.0",
        ),
        'spec.template.spec.nodeSelector["nvidia.com/gpu.deploy.device-plugin"]': ("true", "false"),
        f"{CONTAINER}.volumeMounts[mountPath=/run/nvidia/validations].readOnly": (None, True),
        f"{CONTAINER}.env[name=PASS_DEVICE_SPECS].value": ("true", "false"),
    }


def test_reordering_a_keyed_list_is_not_a_change(desired: dict[str, Any]) -> None:
    after = copy.deepcopy(desired)
    pod = after["spec"]["template"]["spec"]
    pod["containers"][0]["env"].reverse()
    pod["containers"][0]["volumeMounts"].reverse()
    pod["volumes"].reverse()
    assert diff.diff(desired, after) == ()


def test_keyed_items_added_and_removed_are_whole_items(desired: dict[str, Any]) -> None:
    after = copy.deepcopy(desired)
    env = after["spec"]["template"]["spec"]["containers"][0]["env"]
    removed = env.pop(0)
    env.append({"name": "MIG_STRATEGY", "value": "single"})
    changes = {c.path: c for c in diff.diff(desired, after)}
    assert changes[f"{CONTAINER}.env[name=MIG_STRATEGY]"].after == {"name": "MIG_STRATEGY", "value": "single"}
    assert changes[f"{CONTAINER}.env[name=MIG_STRATEGY]"].op == "add"
    assert changes[f"{CONTAINER}.env[name=PASS_DEVICE_SPECS]"].before == removed
    assert changes[f"{CONTAINER}.env[name=PASS_DEVICE_SPECS]"].op == "remove"


def test_ordered_lists_are_compared_whole_and_order_matters(desired: dict[str, Any]) -> None:
    after = copy.deepcopy(desired)
    pod = after["spec"]["template"]["spec"]
    pod["tolerations"].insert(0, {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"})
    pod["initContainers"][0]["command"] = ["-c", "sh"]
    changes = {c.path: c for c in diff.diff(desired, after)}
    assert set(changes) == {
        "spec.template.spec.tolerations",
        "spec.template.spec.initContainers[name=toolkit-validation].command",
    }
    assert changes["spec.template.spec.tolerations"].after == pod["tolerations"]
    assert changes["spec.template.spec.initContainers[name=toolkit-validation].command"].before == [
        "sh",
        "-c",
    ]


def test_ports_are_keyed_by_container_port_and_service_port() -> None:
    before: dict[str, Any] = {
        "spec": {
            "containers": [
                {
                    "name": "exporter",
                    "ports": [
                        {"name": "metrics", "containerPort": 9400},
                        {"name": "debug", "containerPort": 9401},
                    ],
                }
            ]
        }
    }
    after = copy.deepcopy(before)
    after["spec"]["containers"][0]["ports"].reverse()
    after["spec"]["containers"][0]["ports"][0]["name"] = "dbg"
    assert [c.path for c in diff.diff(before, after)] == [
        "spec.containers[name=exporter].ports[containerPort=9401].name"
    ]
    service = {"spec": {"ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400}]}}
    changed = {"spec": {"ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9500}]}}
    assert [c.path for c in diff.diff(service, changed)] == ["spec.ports[port=9400].targetPort"]


def test_empty_maps_and_lists_equal_absent_as_the_server_omits_them() -> None:
    authored = {"metadata": {"name": "x", "labels": {}, "annotations": {}}, "spec": {"args": [], "x": None}}
    assert diff.diff(authored, {"metadata": {"name": "x"}, "spec": {}}) == ()
    # but an empty struct like emptyDir: {} is a value, not an omission
    assert [c.path for c in diff.diff({"v": {"emptyDir": {}}}, {"v": {}})] == ["v.emptyDir"]


def test_diff_is_deterministic_and_ordered_by_path(desired: dict[str, Any]) -> None:
    after = copy.deepcopy(desired)
    after["metadata"]["labels"]["tier"] = "gpu"
    after["spec"]["template"]["spec"]["priorityClassName"] = "high"
    after["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = "10%"
    first = diff.diff(desired, after)
    assert [c.path for c in first] == sorted(c.path for c in first)
    assert first == diff.diff(copy.deepcopy(desired), copy.deepcopy(after))
    assert len(first) == 3


def test_new_mapping_keys_are_reported_one_by_one_not_as_a_root_change() -> None:
    """The deepdiff trap: with its default threshold a mostly-new mapping is one root change."""
    changes = diff.diff({}, {"foo": "1", "bar": "2"})
    assert [(c.path, c.op) for c in changes] == [("bar", "add"), ("foo", "add")]


@pytest.mark.parametrize(
    "path",
    [
        "spec.template.spec.containers[name=nvidia-device-plugin].image",
        'metadata.labels["app.kubernetes.io/name"]',
        'spec.volumes[name="a b"].hostPath.path',
        "spec.ports[containerPort=53,protocol=UDP].name",
        "spec.tolerations[0]",
    ],
)
def test_paths_round_trip(path: str) -> None:
    assert diff.render_path(diff.parse_path(path)) == path


def test_requires_replace_on_selector_changes_only(desired: dict[str, Any]) -> None:
    selector = copy.deepcopy(desired)
    selector["spec"]["selector"]["matchLabels"]["app"] = "device-plugin"
    image = copy.deepcopy(desired)
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "other:v1"
    assert diff.requires_replace(diff.diff(desired, selector), ["spec.selector"])
    assert not diff.requires_replace(diff.diff(desired, image), ["spec.selector"])
    # a prefix must end at a segment: spec.selectorX is not below spec.selector
    assert not diff.requires_replace([diff.FieldChange("spec.selectorX", 1, 2)], ["spec.selector"])


def test_normalize_strips_server_defaults_without_a_template(
    desired: dict[str, Any], live: dict[str, Any]
) -> None:
    """For objects gpuplan has no template for (deletes, adoption, records written from a server answer)."""
    normalized = normalize.normalize(live)
    # the quantity the server rewrote (0.1 as 100m) is the same value
    assert normalized["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
    assert diff.diff(normalized, desired) == ()


def test_normalize_keeps_non_default_values(live: dict[str, Any]) -> None:
    pod = live["spec"]["template"]["spec"]
    pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod["containers"][0]["imagePullPolicy"] = "Always"
    live["spec"]["revisionHistoryLimit"] = 3
    normalized = normalize.normalize(live)
    assert normalized["spec"]["revisionHistoryLimit"] == 3
    assert normalized["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert normalized["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"


def test_normalize_service_drops_allocated_and_defaulted_fields() -> None:
    live = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nvidia-dcgm-exporter", "uid": "u"},
        "spec": {
            "clusterIP": "10.96.4.2",
            "clusterIPs": ["10.96.4.2"],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "None",
            "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster",
            "selector": {"app": "nvidia-dcgm-exporter"},
            "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP", "targetPort": 9400}],
        },
        "status": {"loadBalancer": {}},
    }
    assert normalize.normalize(live) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nvidia-dcgm-exporter"},
        "spec": {
            "selector": {"app": "nvidia-dcgm-exporter"},
            "ports": [{"name": "gpu-metrics", "port": 9400}],
        },
    }
