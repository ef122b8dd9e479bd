"""The real kubectl 1.37 against the server: what it prints on a real cluster, every verb it uses, and
``kubectl apply`` with its default (OpenAPI v3 backed) validation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from server_kit import (
    CONFIGMAPS,
    DAEMONSETS,
    KUBECTL,
    NAMESPACES,
    NODES,
    PODS,
    ProxyCalls,
    daemonset,
    node,
    pod,
    put,
)

from gpuplan.sim.api.server import ApiServer
from gpuplan.sim.api.store import Store

pytestmark = pytest.mark.kubectl
KubectlFn = Any  # the conftest fixture: run(*args, check=True) -> CompletedProcess[str]

DAEMONSET_YAML = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nvidia-device-plugin-daemonset
  namespace: kube-system
spec:
  selector:
    matchLabels: {name: nvidia-device-plugin-ds}
  updateStrategy: {type: RollingUpdate}
  template:
    metadata:
      labels: {name: nvidia-device-plugin-ds}
    spec:
      nodeSelector: {nvidia.com/gpu.present: "true"}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
      - name: nvidia-device-plugin-ctr
        image: nvcr.io/nvidia/k8s-device-plugin:v0.20.1
        env: [{name: FAIL_ON_INIT_ERROR, value: "false"}]
"""
CONFIGMAP_YAML = """
apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-config, namespace: kube-system}
data: {config.yaml: "version: v1"}
"""
CRD_YAML = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterpolicies.nvidia.com}
spec:
  group: nvidia.com
  scope: Cluster
  names: {kind: ClusterPolicy, plural: clusterpolicies, singular: clusterpolicy, listKind: ClusterPolicyList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
CR_YAML = """
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec: {driver: {enabled: false}, operator: {defaultRuntime: containerd}}
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _lines(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def test_get_raw_version(kubectl: KubectlFn) -> None:
    assert json.loads(kubectl("get", "--raw", "/version").stdout)["gitVersion"].startswith("v1.37.")


def test_kubectl_fails_without_the_ca(api: ApiServer, tmp_path: Path) -> None:
    from gpuplan.sim.api.server import write_kubeconfig

    config = write_kubeconfig(tmp_path / "no-ca", api.url, "test-token-0123456789")
    result = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "c"), "get", "ns"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "certificate" in result.stderr


def test_kubectl_with_a_wrong_token_is_unauthorized(api: ApiServer, tmp_path: Path) -> None:
    from gpuplan.sim.api.server import write_kubeconfig

    config = write_kubeconfig(tmp_path / "bad", api.url, "not-the-token", api.ca_pem)
    result = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "c"), "get", "ns"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "You must be logged in to the server" in result.stderr


def test_get_pods_wide_prints_the_real_columns(store: Store, kubectl: KubectlFn) -> None:
    put(store, PODS, pod("dcgm-exporter-abcde", node_name="gpu-1", ip="10.244.1.7"))
    put(
        store,
        PODS,
        pod("plugin-xyz", node_name="gpu-2", waiting="CrashLoopBackOff", ready=False, phase="Running"),
    )
    rows = _lines(kubectl("get", "pods", "-o", "wide").stdout)
    assert rows[0] == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    by_name = {row[0]: row for row in rows[1:]}
    assert by_name["dcgm-exporter-abcde"][1:4] == ["1/1", "Running", "0"]
    assert by_name["dcgm-exporter-abcde"][5:7] == ["10.244.1.7", "gpu-1"]
    assert by_name["plugin-xyz"][1:3] == ["0/1", "CrashLoopBackOff"]


def test_get_nodes_prints_status_roles_and_version(store: Store, kubectl: KubectlFn) -> None:
    put(store, NODES, node("gpu-1"))
    put(store, NODES, node("gpu-2", ready=False))
    put(store, NODES, node("cp", unschedulable=True, labels={"node-role.kubernetes.io/control-plane": ""}))
    rows = _lines(kubectl("get", "nodes").stdout)
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert {row[0]: (row[1], row[2], row[4]) for row in rows[1:]} == {
        "cp": ("Ready,SchedulingDisabled", "control-plane", "v1.37.1"),
        "gpu-1": ("Ready", "<none>", "v1.37.1"),
        "gpu-2": ("NotReady", "<none>", "v1.37.1"),
    }
    wide = _lines(kubectl("get", "node", "gpu-1", "-o", "wide").stdout)
    assert wide[0][5:] == ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    assert wide[1][5] == "10.0.0.1"
    assert wide[1][-3:] == ["6.8.0-101-generic", "(amd64)", "containerd://2.1.4"]  # cells split at spaces


def test_get_node_show_labels(store: Store, kubectl: KubectlFn) -> None:
    put(store, NODES, node("lab-node", labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060"}))
    rows = _lines(kubectl("get", "node", "lab-node", "--show-labels").stdout)
    assert rows[0][-1] == "LABELS"
    assert set(rows[1][-1].split(",")) == {
        "kubernetes.io/hostname=lab-node",
        "nvidia.com/gpu.product=NVIDIA-GeForce-RTX-3060",
    }


def test_get_daemonsets_all_namespaces(store: Store, kubectl: KubectlFn) -> None:
    put(
        store,
        DAEMONSETS,
        daemonset(
            "nvidia-device-plugin-daemonset",
            namespace="kube-system",
            node_selector={"nvidia.com/gpu.present": "true"},
        ),
    )
    rows = _lines(kubectl("get", "ds", "-A").stdout)
    assert rows[0] == [
        "NAMESPACE",
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE",
        "SELECTOR",
        "AGE",
    ]
    assert rows[1][:8] == [
        "kube-system",
        "nvidia-device-plugin-daemonset",
        "0",
        "0",
        "0",
        "0",
        "0",
        "nvidia.com/gpu.present=true",
    ]


def test_apply_with_default_validation_for_daemonset_configmap_and_custom_resource(
    store: Store, kubectl: KubectlFn, tmp_path: Path
) -> None:
    out = kubectl(
        "apply",
        "-f",
        _write(tmp_path, "ds.yaml", DAEMONSET_YAML),
        "-f",
        _write(tmp_path, "cm.yaml", CONFIGMAP_YAML),
    ).stdout
    assert (
        "daemonset.apps/nvidia-device-plugin-daemonset created" in out
        and "configmap/plugin-config created" in out
    )
    kubectl("apply", "-f", _write(tmp_path, "crd.yaml", CRD_YAML))
    assert (
        "clusterpolicy.nvidia.com/cluster-policy created"
        in kubectl("apply", "-f", _write(tmp_path, "cr.yaml", CR_YAML)).stdout
    )
    changed = DAEMONSET_YAML.replace("v0.20.1", "v0.20.2")
    assert "configured" in kubectl("apply", "-f", _write(tmp_path, "ds2.yaml", changed)).stdout
    live = store.get(DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset")
    assert live["spec"]["template"]["spec"]["containers"][0]["image"].endswith("v0.20.2")
    assert live["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "FAIL_ON_INIT_ERROR", "value": "false"}
    ]


def test_apply_validate_strict_rejects_an_unknown_field(kubectl: KubectlFn, tmp_path: Path) -> None:
    bad = DAEMONSET_YAML.replace("  updateStrategy:", "  bogusField: 1\n  updateStrategy:")
    result = kubectl("apply", "--validate=strict", "-f", _write(tmp_path, "bad.yaml", bad), check=False)
    assert result.returncode == 1
    assert "Error from server (BadRequest): error when creating" in result.stderr
    assert 'strict decoding error: unknown field "spec.bogusField"' in result.stderr


def test_server_side_apply_and_dry_run_server(store: Store, kubectl: KubectlFn, tmp_path: Path) -> None:
    path = _write(tmp_path, "ds.yaml", DAEMONSET_YAML)
    assert (
        "serverside-applied (server dry run)"
        in kubectl("apply", "--server-side", "--dry-run=server", "-f", path).stdout
    )
    assert store.list(DAEMONSETS).items == []
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", path).stdout
    managers = [
        m["manager"]
        for m in store.get(DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset")["metadata"][
            "managedFields"
        ]
    ]
    assert managers == ["kubectl"]


def test_patch_label_annotate_set_image_and_delete(store: Store, kubectl: KubectlFn) -> None:
    put(store, DAEMONSETS, daemonset("dp"))
    kubectl("patch", "ds", "dp", "--type=merge", "-p", '{"metadata":{"labels":{"a":"1"}}}')
    kubectl(
        "patch", "ds", "dp", "--type=json", "-p", '[{"op":"add","path":"/metadata/labels/b","value":"2"}]'
    )
    kubectl(
        "patch",
        "ds",
        "dp",
        "--type=strategic",
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"ctr","env":[{"name":"X","value":"1"}]}]}}}}',
    )
    kubectl("label", "ds", "dp", "c=3")
    kubectl("annotate", "ds", "dp", "note=hi")
    kubectl("set", "image", "ds/dp", "ctr=nvcr.io/nvidia/k8s-device-plugin:v0.20.2")
    live = store.get(DAEMONSETS, "default", "dp")
    assert live["metadata"]["labels"] == {"a": "1", "b": "2", "c": "3"}
    # the template generation: 1 at create, then the two template changes above (env patch, set image)
    assert live["metadata"]["annotations"] == {"note": "hi", "deprecated.daemonset.template.generation": "3"}
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith("v0.20.2") and container["env"] == [{"name": "X", "value": "1"}]
    managers = {m["manager"] for m in live["metadata"]["managedFields"]}
    assert {"kubectl-patch", "kubectl-label", "kubectl-annotate", "kubectl-set"} <= managers
    assert 'daemonset.apps "dp" deleted' in kubectl("delete", "ds", "dp", "--cascade=foreground").stdout
    assert store.list(DAEMONSETS).items == []


def test_errors_print_as_kubectl_prints_a_real_server_s(kubectl: KubectlFn) -> None:
    result = kubectl("get", "ds", "absent", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == 'Error from server (NotFound): daemonsets.apps "absent" not found'


def test_label_and_field_selectors(store: Store, kubectl: KubectlFn) -> None:
    for name, app, node_name in (("a", "x", "n1"), ("b", "y", "n2"), ("c", "z", "n1")):
        put(store, PODS, pod(name, labels={"app": app}, node_name=node_name))
    names = kubectl("get", "pods", "-l", "app in (x,y)", "-o", "name").stdout.split()
    assert names == ["pod/a", "pod/b"]
    names = kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=n1", "-o", "name").stdout.split()
    assert names == ["pod/a", "pod/c"]


def test_chunked_lists(store: Store, kubectl: KubectlFn) -> None:
    for index in range(7):
        put(store, NODES, node(f"gpu-{index}"))
    result = kubectl("get", "nodes", "--chunk-size=2", "-v=6")
    assert len(_lines(result.stdout)) == 8
    assert result.stderr.count("/api/v1/nodes?") >= 4  # one request per page of two


def test_get_pods_watch_prints_rows_as_events_arrive(store: Store, kubeconfig: Path, tmp_path: Path) -> None:
    put(store, PODS, pod("first"))
    command = [
        str(KUBECTL),
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(tmp_path / "c"),
        "get",
        "pods",
        "-w",
        "--request-timeout=30s",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            header = process.stdout.readline().split()
            assert header[:3] == ["NAME", "READY", "STATUS"]
            assert process.stdout.readline().split()[0] == "first"
            put(store, PODS, pod("second"))
            assert process.stdout.readline().split()[0] == "second"
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_pod_proxy_through_get_raw(store: Store, kubectl: KubectlFn, proxy_calls: ProxyCalls) -> None:
    put(store, PODS, pod("nvidia-dcgm-exporter-x", namespace="kube-system", port=9400))
    out = kubectl(
        "get", "--raw", "/api/v1/namespaces/kube-system/pods/nvidia-dcgm-exporter-x:9400/proxy/metrics"
    ).stdout
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="nvidia-dcgm-exporter-x"} 42' in out
    assert proxy_calls.calls == [("nvidia-dcgm-exporter-x", 9400, "/metrics", "")]


def test_generator_commands_send_protobuf_the_server_reads(store: Store, kubectl: KubectlFn) -> None:
    # kubectl's typed clients send built-in kinds as application/vnd.kubernetes.protobuf
    assert kubectl("create", "namespace", "generated").stdout == "namespace/generated created\n"
    assert store.get(NAMESPACES, None, "generated")["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "generated"
    }


def test_drain_cordons_and_evicts_then_uncordon(store: Store, kubectl: KubectlFn) -> None:
    put(store, NODES, node("gpu-1"))
    put(store, PODS, pod("workload", node_name="gpu-1"))
    put(store, PODS, pod("elsewhere", node_name="gpu-2"))
    # no kubelet runs here to finish a graceful eviction: drain asks for grace period 0
    out = kubectl(
        "drain", "gpu-1", "--force", "--ignore-daemonsets", "--grace-period=0", "--timeout=30s"
    ).stdout
    assert "pod/workload evicted" in out and "node/gpu-1 drained" in out
    assert store.get(NODES, None, "gpu-1")["spec"]["unschedulable"] is True
    assert [p["metadata"]["name"] for p in store.list(PODS).items] == ["elsewhere"]
    kubectl("uncordon", "gpu-1")
    assert not store.get(NODES, None, "gpu-1")["spec"].get("unschedulable")


def test_create_and_replace_with_a_stale_resource_version_conflicts(
    store: Store, kubectl: KubectlFn, tmp_path: Path
) -> None:
    assert (
        "configmap/plugin-config created"
        in kubectl("create", "-f", _write(tmp_path, "cm.yaml", CONFIGMAP_YAML)).stdout
    )
    live = json.loads(kubectl("get", "cm", "plugin-config", "-n", "kube-system", "-o", "json").stdout)
    stale = dict(live, data={"config.yaml": "version: v2"})
    kubectl("replace", "-f", _write(tmp_path, "fresh.json", json.dumps(stale)))
    result = kubectl("replace", "-f", _write(tmp_path, "stale.json", json.dumps(stale)), check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("Error from server (Conflict): error when replacing")
    assert "the object has been modified" in result.stderr


def test_apply_validate_warn_prints_the_server_warning(
    store: Store, kubectl: KubectlFn, tmp_path: Path
) -> None:
    odd = CONFIGMAP_YAML.replace("\ndata:", "\nsurplus: 1\ndata:")
    result = kubectl("apply", "--validate=warn", "-f", _write(tmp_path, "odd.yaml", odd))
    assert 'Warning: unknown field "surplus"' in result.stderr
    assert "surplus" not in store.get(CONFIGMAPS, "kube-system", "plugin-config")
