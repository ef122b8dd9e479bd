"""The planner's rule-based default stripping against the simulator's API server: an object created in the
store and read back normalises to the same as the object as sent, for every kind and for objects that spell
out the defaults themselves; deliberate values survive; the imagePullPolicy rule is the server's."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.planner.diff import fields, normalize
from gpuplan.planner.diff.defaults import default_pull_policy
from gpuplan.sim.api import defaults, registry, store

Obj = dict[str, Any]
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    st.create(
        st.registry.for_kind("v1", "Namespace"), {"metadata": {"name": "gpu-operator"}}, manager="setup"
    )
    st.create(
        st.registry.for_kind("node.k8s.io/v1", "RuntimeClass"),
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        manager="setup",
    )
    yield st
    st.close()


def pod_spec() -> Obj:
    """A pod spec touching every defaulted field: env sources, probes, lifecycle hooks, every volume kind."""
    return {
        "serviceAccountName": "nvidia-dcgm-exporter",
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
        "containers": [
            {
                "name": "exporter",
                "image": IMAGE,
                "ports": [{"name": "metrics", "containerPort": 9400}],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                ],
                "livenessProbe": {"httpGet": {"port": 9400}},
                "readinessProbe": {"httpGet": {"port": 9400, "path": "/health"}, "periodSeconds": 5},
                "lifecycle": {
                    "preStop": {"httpGet": {"port": 9400}},
                    "postStart": {"exec": {"command": ["x"]}},
                },
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
        "volumes": [
            {"name": "scratch"},
            {"name": "config", "configMap": {"name": "metrics"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {
                "name": "info",
                "downwardAPI": {
                    "items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {
                            "path": "cpu",
                            "resourceFieldRef": {"containerName": "exporter", "resource": "limits.cpu"},
                        },
                    ]
                },
            },
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token"}},
                        {
                            "downwardAPI": {
                                "items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                            }
                        },
                    ]
                },
            },
            {"name": "dev", "hostPath": {"path": "/dev"}},
        ],
    }


def daemonset() -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec()},
        },
    }


def deployment() -> Obj:
    spec = pod_spec()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-operator", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "op"}},
            "template": {"metadata": {"labels": {"app": "op"}}, "spec": spec},
        },
    }


def pod() -> Obj:
    spec = pod_spec()
    spec["hostNetwork"] = True
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "gpu-operator"},
        "spec": spec,
    }


def service(kind: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc-{kind.lower()}-{len(spec)}", "namespace": "gpu-operator"},
        "spec": {"type": kind, "selector": {"app": "x"}, "ports": [{"name": "m", "port": 9400}], **spec},
    }


OBJECTS: list[Obj] = [
    daemonset(),
    deployment(),
    pod(),
    service("ClusterIP"),
    service("ClusterIP", clusterIP="None"),
    service("ClusterIP", sessionAffinity="ClientIP"),
    service("NodePort"),
    service("NodePort", ports=[{"name": "m", "port": 9400, "nodePort": 31000}]),
    service("LoadBalancer", externalTrafficPolicy="Local"),
    service("ClusterIP", externalIPs=["192.0.2.10"], ipFamilyPolicy="SingleStack"),
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "gpu-operator"},
        "stringData": {"token": "s3cret"},
    },
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gpu-monitoring", "labels": {"team": "gpu"}},
    },
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "metrics", "namespace": "gpu-operator"},
        "data": {"dcgm.csv": "DCGM_FI_DEV_GPU_TEMP, gauge, temp"},
    },
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"},
    },
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "gpu-critical"},
        "value": 1000000,
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia-cdi"},
        "handler": "nvidia-cdi",
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "gpu-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gpu-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"}],
    },
]


def with_defaults_spelled_out(obj: Obj) -> Obj:
    """The object as a careful author might send it: every server default written out by hand."""
    out = copy.deepcopy(obj)
    rt = registry.Registry.builtin().for_kind(out["apiVersion"], out["kind"])
    assert rt is not None
    defaults.default_object(rt, out)
    return out


def read_back(s: store.Store, obj: Obj) -> Obj:
    rt = s.registry.for_kind(obj["apiVersion"], obj["kind"])
    meta = obj["metadata"]
    s.create(rt, copy.deepcopy(obj), namespace=meta.get("namespace"), manager="kubectl-create")
    found: Obj = s.get(rt, meta.get("namespace"), meta["name"])
    return found


@pytest.mark.parametrize("sent", OBJECTS, ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_an_object_read_back_normalises_to_what_was_sent(s: store.Store, sent: Obj) -> None:
    live = read_back(s, sent)
    assert live != sent  # the server did add something
    # the same object but for the spelling of its quantities (the server stores `1` as "1"), which the diff
    # compares by value
    assert fields.diff(normalize.normalize(sent), normalize.normalize(live)) == ()


@pytest.mark.parametrize("sent", OBJECTS, ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_defaults_written_out_by_the_author_normalise_the_same(s: store.Store, sent: Obj) -> None:
    spelled = with_defaults_spelled_out(sent)
    assert fields.diff(normalize.normalize(sent), normalize.normalize(spelled)) == ()
    assert fields.diff(normalize.normalize(sent), normalize.normalize(read_back(s, spelled))) == ()


def test_the_normal_form_drops_every_default_of_the_pod_spec(s: store.Store) -> None:
    """Not just equal on both sides: the defaults are really gone (a strip that did nothing would pass the
    property above for objects the server leaves alone)."""
    live = normalize.normalize(read_back(s, daemonset()))
    spec = live["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert "imagePullPolicy" not in container and "terminationMessagePath" not in container
    assert container["livenessProbe"] == {"httpGet": {"port": 9400}}
    assert container["lifecycle"]["preStop"] == {"httpGet": {"port": 9400}}
    assert container["env"][1]["valueFrom"] == {"resourceFieldRef": {"resource": "limits.memory"}}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["scratch"] == {"name": "scratch"}
    assert volumes["info"]["downwardAPI"]["items"][0] == {
        "path": "labels",
        "fieldRef": {"fieldPath": "metadata.labels"},
    }
    assert volumes["token"]["projected"]["sources"][0] == {"serviceAccountToken": {"path": "token"}}
    assert "enableServiceLinks" not in spec and "dnsPolicy" not in spec


def test_values_an_author_sets_deliberately_are_kept(s: store.Store) -> None:
    explicit_node_port = normalize.normalize(read_back(s, OBJECTS[7]))
    assert explicit_node_port["spec"]["ports"] == [{"name": "m", "port": 9400, "nodePort": 31000}]
    allocated = normalize.normalize(
        read_back(s, service("NodePort", sessionAffinity="None", externalTrafficPolicy="Cluster"))
    )
    assert "nodePort" not in allocated["spec"]["ports"][0] and "clusterIP" not in allocated["spec"]
    headless = normalize.normalize(read_back(s, OBJECTS[4]))
    assert headless["spec"]["clusterIP"] == "None"
    single_stack = normalize.normalize(read_back(s, OBJECTS[9]))
    assert single_stack["spec"]["ipFamilyPolicy"] == "SingleStack"
    template = daemonset()
    template["spec"]["template"]["spec"]["enableServiceLinks"] = True
    template["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    kept = normalize.normalize(template)["spec"]["template"]["spec"]
    assert kept["enableServiceLinks"] is True and kept["containers"][0]["imagePullPolicy"] == "Always"
    custom_affinity = service(
        "ClusterIP", sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}
    )
    assert normalize.normalize(custom_affinity)["spec"]["sessionAffinityConfig"] == {
        "clientIP": {"timeoutSeconds": 60}
    }


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "busybox:latest",
        "busybox:1.36",
        "nvcr.io/nvidia/driver:580.105.08-ubuntu24.04",
        "img:latest@sha256:" + "a" * 64,
        "img@sha256:" + "b" * 64,
        "img:1.0@sha256:" + "c" * 64,
        "localhost:5000/img",
        "localhost:5000/img:latest",
        "localhost:5000/img:2",
        "registry:5000/a/b/c",
        "",
    ],
)
def test_the_pull_policy_rule_is_the_servers(image: str) -> None:
    assert default_pull_policy(image) == defaults.pull_policy(image)
    assert default_pull_policy(image) == (
        "Always"
        if image and ("latest" in image or ("@" not in image and ":" not in image.rsplit("/", 1)[-1]))
        else "IfNotPresent"
    )
