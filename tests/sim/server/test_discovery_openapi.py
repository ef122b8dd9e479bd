"""Discovery (legacy and aggregated), the OpenAPI v3 documents, routing, certificates and the kubeconfig."""

from __future__ import annotations

import gzip
import json
import stat
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from server_kit import DAEMONSETS, Raw

from gpuplan.sim.api import certs, discovery, gen_openapi, openapi, routing
from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.api.store import Store

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "scope": "Cluster",
        "names": {
            "kind": "ClusterPolicy",
            "plural": "clusterpolicies",
            "singular": "clusterpolicy",
            "shortNames": ["cp"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def _by_name(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in resources}


def test_core_discovery_lists_resources_with_subresources(raw: Raw) -> None:
    assert raw.json("GET", "/api")[1]["versions"] == ["v1"]
    code, body = raw.json("GET", "/api/v1")
    assert code == 200 and body["kind"] == "APIResourceList" and body["groupVersion"] == "v1"
    resources = _by_name(body["resources"])
    pods = resources["pods"]
    assert (
        pods["kind"],
        pods["singularName"],
        pods["namespaced"],
        pods["shortNames"],
        pods["categories"],
    ) == ("Pod", "pod", True, ["po"], ["all"])
    assert {"get", "list", "watch", "create", "patch", "update", "delete"} <= set(pods["verbs"])
    assert resources["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "kind": "Eviction",
        "verbs": ["create"],
        "group": "policy",
        "version": "v1",
    }
    assert resources["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert resources["pods/proxy"]["kind"] == "PodProxyOptions"
    assert not resources["nodes"]["namespaced"]
    assert resources["pods/log"]["verbs"] == ["get"] and resources["pods/log"]["kind"] == "Pod"
    assert resources["pods/exec"]["kind"] == "PodExecOptions"
    assert resources["pods/portforward"]["verbs"] == ["create", "get"]
    assert "pods/attach" not in resources  # not served, so not advertised


def test_group_discovery(raw: Raw) -> None:
    groups = {g["name"]: g for g in raw.json("GET", "/apis")[1]["groups"]}
    assert {
        "apps",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "node.k8s.io",
        "apiextensions.k8s.io",
        "policy",
    } <= set(groups)
    assert groups["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    assert raw.json("GET", "/apis/apps")[1]["kind"] == "APIGroup"
    daemonsets = _by_name(raw.json("GET", "/apis/apps/v1")[1]["resources"])["daemonsets"]
    assert daemonsets["shortNames"] == ["ds"] and daemonsets["kind"] == "DaemonSet"
    assert raw.json("GET", "/apis/nope")[0] == 404


def test_aggregated_discovery_when_asked_first(raw: Raw) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    code, headers, data = raw.request("GET", "/apis", headers={"Accept": accept})
    assert code == 200 and headers["content-type"] == discovery.AGGREGATED_MEDIA_TYPE
    body = json.loads(data)
    assert body["kind"] == "APIGroupDiscoveryList"
    apps = next(item for item in body["items"] if item["metadata"].get("name") == "apps")
    ds = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "daemonsets")
    assert ds["responseKind"] == {"group": "apps", "version": "v1", "kind": "DaemonSet"}
    assert ds["scope"] == "Namespaced" and ds["subresources"][0]["subresource"] == "status"
    core = json.loads(raw.request("GET", "/api", headers={"Accept": accept})[2])
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    eviction = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert eviction["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}


def test_a_crd_appears_in_discovery_and_openapi_and_goes_again(store: Store, raw: Raw) -> None:
    assert raw.json("GET", "/apis/nvidia.com/v1")[0] == 404
    crds = store.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    store.create(crds, CRD, manager="test")
    resources = _by_name(raw.json("GET", "/apis/nvidia.com/v1")[1]["resources"])
    assert resources["clusterpolicies"]["namespaced"] is False and resources["clusterpolicies"][
        "shortNames"
    ] == ["cp"]
    index = raw.json("GET", "/openapi/v3")[1]["paths"]
    document = raw.json("GET", index["apis/nvidia.com/v1"]["serverRelativeURL"])[1]
    schema = document["components"]["schemas"]["com.nvidia.v1.ClusterPolicy"]
    assert schema["x-kubernetes-preserve-unknown-fields"] is True
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "nvidia.com", "version": "v1", "kind": "ClusterPolicy"}
    ]
    store.delete(crds, None, "clusterpolicies.nvidia.com")
    assert raw.json("GET", "/apis/nvidia.com/v1")[0] == 404
    assert "apis/nvidia.com/v1" not in raw.json("GET", "/openapi/v3")[1]["paths"]


def test_openapi_v3_documents_let_kubectl_hand_validation_to_the_server(raw: Raw) -> None:
    index = raw.json("GET", "/openapi/v3")[1]["paths"]
    assert index["apis/apps/v1"]["serverRelativeURL"].startswith("/openapi/v3/apis/apps/v1?hash=")
    document = raw.json("GET", index["apis/apps/v1"]["serverRelativeURL"])[1]
    patch = document["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "DaemonSet"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"] if p["in"] == "query"]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    schemas = document["components"]["schemas"]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["items"] == {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}
    assert (
        schemas["io.k8s.api.apps.v1.DaemonSet"]["x-kubernetes-group-version-kind"][0]["kind"] == "DaemonSet"
    )
    assert raw.json("GET", "/openapi/v2")[0] == 404


def test_unknown_fields_walks_refs_lists_and_maps() -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "spec": {
            "selector": {},
            "template": {
                "spec": {
                    "containers": [{"name": "c", "bogus": 1, "resources": {"limits": {"nvidia.com/gpu": 1}}}]
                }
            },
            "extra": {},
        },
    }
    assert openapi.unknown_fields(DAEMONSETS, ds) == ["spec.template.spec.containers[0].bogus", "spec.extra"]
    assert openapi.unknown_fields(DAEMONSETS, ds, prune=True)
    assert openapi.unknown_fields(DAEMONSETS, ds) == []
    containers: list[dict[str, Any]] = ds["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    assert "bogus" not in containers[0]


def test_generated_schema_data_is_current_and_small() -> None:
    """The committed data equals what the generator makes now (rerun gen_openapi after changing the kinds)."""
    fresh = gen_openapi.build(gen_openapi.load_definitions(), Registry.builtin())
    committed = json.loads(gzip.decompress(gen_openapi.OUTPUT.read_bytes()))
    assert committed == fresh
    assert gen_openapi.OUTPUT.stat().st_size < 200_000
    assert set(committed["kinds"]) >= {"apps/v1/DaemonSet", "/v1/Pod", "/v1/Node", "/v1/ConfigMap"}


def test_routing_of_resource_proxy_and_namespace_paths() -> None:
    registry = Registry.builtin()
    item = routing.route("/api/v1/namespaces/kube-system/pods/p/status", registry)
    assert (item.kind, item.namespace, item.name, item.subresource) == (
        "resource",
        "kube-system",
        "p",
        "status",
    )
    all_ns = routing.route("/apis/apps/v1/daemonsets", registry)
    assert (all_ns.kind, all_ns.namespace, all_ns.name) == ("resource", None, None)
    proxy = routing.route("/api/v1/namespaces/gpu-operator/pods/dcgm:9400/proxy/metrics", registry)
    assert (proxy.kind, proxy.name, proxy.port, proxy.rest) == ("proxy", "dcgm", 9400, "/metrics")
    assert routing.route("/api/v1/nodes/n1", registry).name == "n1"
    assert routing.route("/api/v1/namespaces/default/nodes/n1", registry).kind == "unknown"
    assert routing.route("/api/v1/pods/p", registry).kind == "unknown"


def test_certificates_name_loopback_and_chain_to_the_ca() -> None:
    generated = certs.generate()
    ca = x509.load_pem_x509_certificate(generated.ca_pem)
    serving = x509.load_pem_x509_certificate(generated.cert_pem)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert serving.issuer == ca.subject
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    serving.verify_directly_issued_by(ca)


def test_write_kubeconfig_is_private_and_complete(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "sub" / "config", "https://127.0.0.1:1234", "tok", b"PEM")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = yaml.safe_load(path.read_text())
    assert config["current-context"] == "gpuplan-sim"
    assert config["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:1234",
        "certificate-authority-data": "UEVN",
    }
    assert config["users"][0]["user"] == {"token": "tok"}
