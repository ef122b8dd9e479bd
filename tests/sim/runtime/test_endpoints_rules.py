"""The endpoints and endpointslice controllers' rules on plain objects: selection, ports, conditions, slices,
and the server's EndpointSlice defaults and validation."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import Store
from gpuplan.sim.controllers import endpoints, endpointslices
from gpuplan.sim.controllers import service_pods as sp

Obj = dict[str, Any]


def service(**spec: Any) -> Obj:
    body = {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"team": "a"}},
        "spec": {**body, **spec},
    }


def pod(name: str, ip: str, *, ready: bool = True, terminating: bool = False, phase: str = "Running") -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "web"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conditions = [{"type": "Ready", "status": str(ready), "lastTransitionTime": "2026-01-01T00:00:01Z"}]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {"name": "c", "ports": [{"name": "web", "containerPort": 8080, "protocol": "TCP"}]}
            ],
        },
        "status": {"phase": phase, "podIP": ip, "conditions": conditions},
    }


def test_a_named_target_port_is_the_container_port_of_that_name() -> None:
    assert sp.find_port(pod("a", "10.0.0.1"), {"targetPort": "web", "protocol": "TCP"}) == 8080
    assert sp.find_port(pod("a", "10.0.0.1"), {"targetPort": "web", "protocol": "UDP"}) is None
    assert sp.find_port(pod("a", "10.0.0.1"), {"targetPort": 9400}) == 9400


def test_endpoints_split_ready_and_not_ready_and_leave_out_terminating_and_terminal_pods() -> None:
    pods = [
        pod("b", "10.0.0.2", ready=False),
        pod("a", "10.0.0.1"),
        pod("c", "10.0.0.3", terminating=True),
        pod("d", "10.0.0.4", phase="Succeeded"),
        pod("e", ""),
    ]
    [subset], truncated = endpoints.subsets(service(), pods)
    assert not truncated
    assert [a["ip"] for a in subset["addresses"]] == ["10.0.0.1"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["10.0.0.2"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_publish_not_ready_addresses_makes_every_pod_ready() -> None:
    pods = [pod("a", "10.0.0.1", ready=False), pod("c", "10.0.0.3", terminating=True)]
    [subset], _ = endpoints.subsets(service(publishNotReadyAddresses=True), pods)
    assert [a["ip"] for a in subset["addresses"]] == ["10.0.0.1", "10.0.0.3"]
    found = endpointslices.desired_endpoints(service(publishNotReadyAddresses=True), pods, {})
    [(_, slice_endpoints)] = found.values()
    assert all(e["conditions"]["ready"] and e["conditions"]["serving"] for e in slice_endpoints)


def test_a_terminating_pod_stays_in_its_slice_as_serving_and_terminating() -> None:
    [(ports, found)] = endpointslices.desired_endpoints(
        service(), [pod("c", "10.0.0.3", terminating=True)], {"node-a": "zone-1"}
    ).values()
    assert ports == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert found == [
        {
            "addresses": ["10.0.0.3"],
            "conditions": {"ready": False, "serving": True, "terminating": True},
            "nodeName": "node-a",
            "zone": "zone-1",
            "targetRef": {"kind": "Pod", "name": "c", "namespace": "ns", "uid": "uid-c"},
        }
    ]


def test_endpoints_beyond_a_thousand_addresses_are_truncated() -> None:
    pods = [pod(f"p{i:04}", f"10.1.{i // 250}.{i % 250 + 1}") for i in range(1001)]
    [subset], truncated = endpoints.subsets(service(), pods)
    assert truncated and len(subset["addresses"]) == 1000


def test_slices_hold_at_most_a_hundred_endpoints_and_are_reused() -> None:
    pods = [pod(f"p{i:03}", f"10.1.0.{i + 1}") for i in range(150)]
    plan = endpointslices.reconcile(service(), pods, [], {})
    assert [len(s["endpoints"]) for s in plan.create] == [100, 50]
    assert not plan.update and not plan.delete
    existing = [{**s, "metadata": {**s["metadata"], "name": f"web-{i}"}} for i, s in enumerate(plan.create)]
    again = endpointslices.reconcile(service(), pods, existing, {})
    assert not again.create and not again.update and not again.delete
    fewer = endpointslices.reconcile(service(), pods[:100], existing, {})
    assert (
        not fewer.create and not fewer.update and [s["metadata"]["name"] for s in fewer.delete] == ["web-1"]
    )
    labels = plan.create[0]["metadata"]["labels"]
    assert labels == {
        "team": "a",
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }


def test_a_service_without_endpoints_keeps_one_placeholder() -> None:
    plan = endpointslices.reconcile(service(), [], [], {})
    [placeholder] = plan.create
    assert placeholder["endpoints"] is None and placeholder["ports"] is None
    kept = {**placeholder, "metadata": {**placeholder["metadata"], "name": "web-x"}}
    again = endpointslices.reconcile(service(), [], [kept], {})
    assert not again.create and not again.update and not again.delete


def test_a_headless_service_is_labelled_so() -> None:
    labels = endpoints.endpoints_labels(service(clusterIP="None"))
    assert labels["service.kubernetes.io/headless"] == ""
    assert labels["endpoints.kubernetes.io/managed-by"] == "endpoint-controller"


SLICE = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {"name": "s"},
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["10.0.0.1"]}],
    "ports": [{"port": 80}],
}


@pytest.fixture
def store() -> Store:
    return Store(Registry.builtin())


def test_the_server_defaults_a_slice_port_and_keeps_its_address_type(store: Store) -> None:
    rt = store.registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
    assert rt is not None
    created = store.create(rt, SLICE, namespace="default", manager="test")
    assert created["ports"] == [{"name": "", "port": 80, "protocol": "TCP"}]
    assert created["metadata"]["generation"] == 1
    with pytest.raises(ApiError) as info:
        store.update(
            rt,
            {**created, "addressType": "IPv6", "endpoints": []},
            namespace="default",
            name="s",
            manager="test",
        )
    assert info.value.code == 422
    assert 'addressType: Invalid value: "IPv6": field is immutable' in info.value.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"addressType": "IPv5"},
            'addressType: Unsupported value: "IPv5": supported values: "FQDN", "IPv4", "IPv6"',
        ),
        (
            {"endpoints": [{"addresses": []}]},
            "endpoints[0].addresses: Required value: must contain at least 1 address",
        ),
        ({"endpoints": [{"addresses": ["fd00::1"]}]}, "must be a valid IPv4 address"),
        (
            {"ports": [{"port": 70000}]},
            "ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        ({"ports": [{"port": 80, "protocol": "ICMP"}]}, 'ports[0].protocol: Unsupported value: "ICMP"'),
        ({"ports": [{"port": 80}, {"port": 81}]}, 'ports[1].name: Duplicate value: ""'),
    ],
)
def test_the_server_refuses_an_invalid_slice(store: Store, change: Obj, message: str) -> None:
    rt = store.registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
    assert rt is not None
    with pytest.raises(ApiError) as info:
        store.create(rt, {**SLICE, **change}, namespace="default", manager="test")
    assert info.value.code == 422 and message in info.value.message
