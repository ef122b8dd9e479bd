"""`gpuplan sim snapshot`: a running cluster (lab, mixed, a fleet with a hand-deployed device plugin, a Helm
release and a ClusterPolicy) written as a scenario file the simulator accepts, started again from that file
and compared (nodes, labels, capacity, objects); read-only with a request count flat in nodes; no
credential the simulator holds in the output; bad input as one Error: line."""

from __future__ import annotations

import base64
import errno
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_stack import lab_spec

from gpuplan import errors
from gpuplan.cli import run
from gpuplan.planner.observe import shape
from gpuplan.planner.spec import model as spec_mod
from gpuplan.providers.kubernetes import KubernetesProvider, Request
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.catalog import CATALOG
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

Invoke = Callable[..., tuple[int, str, str]]
GFD_ONLY = lab_spec(
    devicePlugin="{owner: external}",
    gfd="{version: v0.20.1}",
    dcgmExporter="{owner: none}",
    validator="{owner: none}",
)
PLUGIN_AND_GFD = lab_spec(gfd="{version: v0.20.1}", dcgmExporter="{owner: none}", validator="{owner: none}")
HELM_DATA = base64.b64encode(b"H4sI-the-whole-release-manifest-with-values").decode()
CLUSTER_POLICY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "scope": "Cluster",
        "names": {"plural": "clusterpolicies", "singular": "clusterpolicy", "kind": "ClusterPolicy"},
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
HELM_LABELS = {"app.kubernetes.io/managed-by": "Helm"}
HELM_ANNOTATIONS = {
    "meta.helm.sh/release-name": "gpu-operator",
    "meta.helm.sh/release-namespace": "gpu-operator",
}


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Invoke:
    def call(*argv: str) -> tuple[int, str, str]:
        code = run(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def scenario_data(name: str, spec_text: str | None, *extra: dict[str, Any]) -> dict[str, Any]:
    """Built-in scenario ``name`` with the objects ``spec_text`` renders (namespace first), then ``extra``."""
    data: dict[str, Any] = yaml.safe_load(scenario_mod.load_scenario(name).model_dump_json(exclude_none=True))
    objects = list(data.get("objects") or [])
    if spec_text is not None:
        stack = spec_mod.parse_spec(spec_text, filename="gpustack.yaml")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stack.spec.namespace}}
        objects += [namespace, *(dict(o.manifest) for o in stack.desired_objects())]
    data["objects"] = objects + list(extra)
    return data


def fleet_data(nodes: int) -> dict[str, Any]:
    """fleet-N with the lab's hand-deployed device plugin, GFD, a Helm release of the GPU Operator (its
    release Secret and a ClusterPolicy that leaves driver and toolkit to the hosts)."""
    lab = scenario_mod.load_scenario("lab")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": "sh.helm.release.v1.gpu-operator.v1",
            "namespace": "gpu-operator",
            "labels": {"owner": "helm", "name": "gpu-operator", "status": "deployed", "version": "1"},
        },
        "data": {"release": HELM_DATA},
    }
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy", "labels": HELM_LABELS, "annotations": HELM_ANNOTATIONS},
        "spec": {
            "driver": {"enabled": False},
            "toolkit": {"enabled": False},
            "devicePlugin": {"enabled": False},
        },
    }
    data = scenario_data(f"fleet-{nodes}", GFD_ONLY, *lab.objects, CLUSTER_POLICY_CRD, secret, policy)
    return data


def started(sim_factory: SimFactory, data: Any, tmp_path: Path, name: str) -> tuple[Simulator, Path]:
    sim = sim_factory(data)
    assert sim.wait_idle(60), "the scenario did not settle"
    return sim, sim.write_kubeconfig(tmp_path / f"{name}.kubeconfig")


def nodes_of(kubectl: Any, kubeconfig: Path) -> dict[str, dict[str, Any]]:
    """Each node's labels (GFD's timestamp aside: it moves on), taints, capacity and allocatable."""
    items = json.loads(kubectl("get", "nodes", "-o", "json", kubeconfig=kubeconfig).stdout)["items"]
    found = {}
    for node in items:
        labels = dict(node["metadata"].get("labels") or {})
        labels.pop("nvidia.com/gfd.timestamp", None)
        found[node["metadata"]["name"]] = {
            "labels": labels,
            "taints": node["spec"].get("taints"),
            "capacity": node["status"]["capacity"],
            "allocatable": node["status"]["allocatable"],
        }
    return found


def snapshot(invoke: Invoke, kubeconfig: Path, out: Path) -> str:
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(out))
    assert code == 0, err
    return out.read_text()


def round_trip(
    sim_factory: SimFactory, invoke: Invoke, kubectl: Any, tmp_path: Path, data: Any
) -> tuple[str, scenario_mod.Scenario]:
    """Snapshot the cluster of ``data``, start the file, snapshot that: both clusters and both files agree."""
    _, first = started(sim_factory, data, tmp_path, "first")
    text = snapshot(invoke, first, tmp_path / "first.yaml")
    parsed = scenario_mod.load_scenario(tmp_path / "first.yaml")  # what `sim start --scenario FILE` loads
    _, second = started(sim_factory, parsed, tmp_path, "second")
    assert nodes_of(kubectl, second) == nodes_of(kubectl, first)
    again = snapshot(invoke, second, tmp_path / "second.yaml")
    assert yaml.safe_load(again) == yaml.safe_load(text), (
        "the restarted cluster has the same shape and objects"
    )
    return text, parsed


def test_lab_round_trip(sim_factory: SimFactory, invoke: Invoke, kubectl: Any, tmp_path: Path) -> None:
    text, parsed = round_trip(sim_factory, invoke, kubectl, tmp_path, scenario_data("lab", GFD_ONLY))
    (node,) = parsed.nodes
    assert (node.name, node.gpu and node.gpu.model, node.gpu and node.gpu.count) == (
        "lab-node",
        "rtx-3060",
        1,
    )
    assert (node.driver, node.toolkit, node.os, node.kernel) == (
        "580.105.08",
        "unknown",
        "ubuntu24.04",
        "6.8.0-101-generic",
    )
    kinds = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in parsed.objects}
    assert ("DaemonSet", "kube-system", "nvidia-device-plugin-daemonset") in kinds
    assert ("DaemonSet", "gpu-operator", "gpu-feature-discovery") in kinds
    assert ("Namespace", None, "gpu-operator") in kinds
    for obj in parsed.objects:
        metadata = obj["metadata"]
        assert not {"uid", "resourceVersion", "managedFields", "creationTimestamp", "generation"} & set(
            metadata
        )
        assert "status" not in obj
    assert "toolkit: unknown" in text and "# " in text.splitlines()[0]


def test_mixed_round_trip(sim_factory: SimFactory, invoke: Invoke, kubectl: Any, tmp_path: Path) -> None:
    data = scenario_data("mixed", PLUGIN_AND_GFD)
    _, parsed = round_trip(sim_factory, invoke, kubectl, tmp_path, data)
    mixed = {n.name: n for n in scenario_mod.load_scenario("mixed").nodes}
    assert {n.name: (n.gpu and n.gpu.model, n.gpu and n.gpu.count, n.driver, n.os) for n in parsed.nodes} == {
        name: (n.gpu and n.gpu.model, n.gpu and n.gpu.count, n.driver, n.os) for name, n in mixed.items()
    }


def test_fleet_folds_into_groups_and_keeps_no_secret(
    sim_factory: SimFactory, invoke: Invoke, kubectl: Any, tmp_path: Path
) -> None:
    sim, kubeconfig = started(sim_factory, fleet_data(40), tmp_path, "fleet")
    text = snapshot(invoke, kubeconfig, tmp_path / "fleet.yaml")
    parsed = scenario_mod.parse_scenario(text)
    fleet = scenario_mod.load_scenario("fleet-40")
    assert sorted((n.namePrefix, n.count, n.gpu and n.gpu.model) for n in parsed.nodes) == sorted(
        (n.namePrefix, n.count, n.gpu and n.gpu.model) for n in fleet.nodes
    ), "one entry per pool, named as the simulator expands it"
    secrets = [o for o in parsed.objects if o["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == ["sh.helm.release.v1.gpu-operator.v1"]
    assert "data" not in secrets[0] and secrets[0]["type"] == "helm.sh/release.v1"
    assert {o["kind"] for o in parsed.objects} >= {"CustomResourceDefinition", "ClusterPolicy", "DaemonSet"}
    held = [sim.token, sim.ca_pem and sim._certs.key_pem.decode() if sim._certs else "", *sim.tokens._issued]
    listed = json.loads(kubectl("get", "secrets", "-A", "-o", "json", kubeconfig=kubeconfig).stdout)["items"]
    for secret in listed:
        for value in (secret.get("data") or {}).values():
            held += [value, base64.b64decode(value).decode("utf-8", "replace")]
    for credential in filter(None, held):
        assert credential not in text
    assert "token" not in text.lower() and "BEGIN" not in text
    _, second = started(sim_factory, parsed, tmp_path, "fleet-again")
    assert nodes_of(kubectl, second) == nodes_of(kubectl, kubeconfig)


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    requests: list[Request] = []
    original = KubernetesProvider._request

    def record(self: KubernetesProvider, request: Request) -> bytes:
        requests.append(request)
        return original(self, request)

    monkeypatch.setattr(KubernetesProvider, "_request", record)
    return requests


def test_read_only_and_flat_in_nodes(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = recorded(monkeypatch)
    counts = []
    for nodes in (8, 60):
        _, kubeconfig = started(sim_factory, fleet_data(nodes), tmp_path, f"fleet{nodes}")
        requests.clear()
        code, out, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot")
        assert code == 0, err
        assert {r.method for r in requests} == {"GET"}, "a snapshot never writes"
        counts.append(len(requests))
        scenario_mod.parse_scenario(out)
    assert counts[0] == counts[1], "the request count does not grow with the nodes"


def test_catalog_agrees_with_the_simulator() -> None:
    assert {key: (m.product, m.pci_device_id[2:].lower()) for key, m in CATALOG.items()} == dict(
        shape.CATALOG
    )


def test_unknown_model_is_a_comment_and_a_cpu_only_node(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path, kubectl: Any
) -> None:
    _, kubeconfig = started(sim_factory, "lab", tmp_path, "lab")
    kubectl("label", "node", "lab-node", "nvidia.com/gpu.product=NVIDIA-A10G", kubeconfig=kubeconfig)
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot")
    assert code == 0, err
    assert "# GPU NVIDIA-A10G is not in the simulator's catalog" in out
    (node,) = scenario_mod.parse_scenario(out).nodes
    assert node.gpu is None and node.labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"


def test_bad_output_and_unreachable_cluster(
    lab_sim: Simulator, kubeconfig: Path, invoke: Invoke, tmp_path: Path
) -> None:
    existing = tmp_path / "fleet.yaml"
    existing.write_text("mine\n")
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(existing))
    assert (code, out) == (errors.EXIT_ERROR, "") and err.startswith("Error: ") and "--force" in err
    assert existing.read_text() == "mine\n"
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(existing), "--force")
    assert code == 0 and existing.read_text().startswith("# A snapshot")
    code, _, err = invoke(
        "--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(tmp_path / "no/x.yaml")
    )
    assert code == errors.EXIT_ERROR and len(err.splitlines()) == 2 and "folder does not exist" in err
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(tmp_path))
    assert code == errors.EXIT_ERROR and "folder" in err
    lab_sim.stop()
    code, out, err = invoke(
        "--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(tmp_path / "y.yaml")
    )
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and "Traceback" not in err
    assert not (tmp_path / "y.yaml").exists()


def test_a_failed_write_is_one_error_line_and_leaves_the_old_file(
    kubeconfig: Path, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuplan.state import files

    def full_disk(path: Path, data: bytes, *, mode: int = 0o600) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_atomically", full_disk)
    old = tmp_path / "fleet.yaml"
    old.write_text("old\n")
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "sim", "snapshot", "-o", str(old), "--force")
    assert code == errors.EXIT_ERROR and err.splitlines()[0].startswith(f"Error: {old}: cannot write")
    assert "disk is full" in err and old.read_text() == "old\n"


def test_fresh_clusters_name_their_models_from_nfd(
    sim_factory: SimFactory, invoke: Invoke, kubectl: Any, tmp_path: Path
) -> None:
    """No GFD has run: NFD's NodeFeature names each node's GPU; a node without NFD is written nfd: false."""
    _, parsed = round_trip(sim_factory, invoke, kubectl, tmp_path / "lab", _fresh("lab"))
    assert [(n.name, n.gpu and n.gpu.model, n.gpu and n.gpu.count, n.nfd) for n in parsed.nodes] == [
        ("lab-node", "rtx-3060", 1, True)
    ]
    data = _fresh("mixed")
    data["nodes"][0]["nfd"] = False
    no_nfd = data["nodes"][0]["name"]
    text, parsed = round_trip(sim_factory, invoke, kubectl, tmp_path / "mixed", data)
    mixed = {n.name: n for n in scenario_mod.load_scenario("mixed").nodes}
    got = {n.name: (n.gpu and n.gpu.model, n.gpu and n.gpu.count, n.nfd) for n in parsed.nodes}
    want = {name: (n.gpu and n.gpu.model, n.gpu and n.gpu.count, name != no_nfd) for name, n in mixed.items()}
    want[no_nfd] = (None, None, False)  # nothing names the model of a node without GFD nor NFD
    assert got == want
    assert "nfd: false" in text


def _fresh(name: str) -> dict[str, Any]:
    data = scenario_data(name, None)
    data["objects"] = [o for o in data["objects"] if o["kind"] != "DaemonSet"]  # nothing labels GPUs
    return data
