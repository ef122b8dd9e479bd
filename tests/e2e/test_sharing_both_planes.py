"""GPU sharing stories on the built-in control plane and on a real one: node pools with device-plugin configs
of their own, MIG through the mig-manager, MPS and time-slicing. Each applies a spec, reads what the nodes
then advertise (allocatable, GFD's labels) through the API, checks that ``plan --detailed-exitcode`` and
``drift report`` find nothing to do, then applies one change and checks again.

Nothing here reads the built-in simulator's store: on the real control plane the nodes are API objects the
simulated kubelets write, the DaemonSets the real controller's, so a story holds on both or shows where the
simulator (or gpuplan) differs from Kubernetes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.modules.mps_daemon import NAME as MPS_DAEMON
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.sim.testing import ClusterFactory, Kubectl

pytestmark = pytest.mark.slow

HOST = {"driver": "580.105.08", "toolkit": "1.18.1", "os": "ubuntu24.04", "kernel": "6.8.0-101-generic"}
PLUGIN = "{version: v0.20.1}"
GFD = "{version: v0.20.1}"
QUICK_GFD = "{version: v0.20.1, sleepInterval: 5s}"
"""For the stories that change a sharing config's replicas: only the ConfigMap changes, and the simulated
device plugin reads it again when GFD's next labelling pass relabels the node (60 s apart by default)."""


def scenario(folder: Path, *nodes: dict[str, Any]) -> str:
    """A scenario file of ``nodes`` (each with the host's driver and toolkit), quick to ready its pods."""
    path = folder / "scenario.yaml"
    document = {"nodes": [{**HOST, **node} for node in nodes], "timing": {"podReadySeconds": 0.01}}
    path.write_text(json.dumps(document))
    return str(path)


class Story:
    """One cluster and one spec file: gpuplan's commands run in this process, the nodes read through the
    API."""

    def __init__(self, cluster: Any, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.cluster, self.capsys = cluster, capsys
        self.kubeconfig = cluster.write_kubeconfig(folder / "kubeconfig")
        self.spec = folder / "gpustack.yaml"
        self.writer = KubernetesWriter(kubeconfig=str(self.kubeconfig))

    def gpuplan(self, *args: str) -> tuple[int, str]:
        self.capsys.readouterr()
        code = run(["--kubeconfig", str(self.kubeconfig), *args])
        captured = self.capsys.readouterr()
        return code, captured.out + captured.err

    def apply(self, text: str) -> str:
        self.spec.write_text(text)
        code, out = self.gpuplan("apply", "-f", str(self.spec), "--auto-approve")
        assert code == 0, out
        assert self.cluster.wait_idle(60), "the cluster did not settle after the apply"
        return out

    def converged(self) -> None:
        """Nothing left to do: the plan has no changes and drift finds nothing."""
        code, out = self.gpuplan("plan", "-f", str(self.spec), "--detailed-exitcode")
        assert code == 0 and "No changes." in out, out
        code, out = self.gpuplan("drift", "report", "-f", str(self.spec), "--format", "json")
        assert code == 0, out

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n.key.name: dict(n.manifest) for n in self.writer.list_objects("v1", "Node").items}

    def allocatable(self, resource: str = "nvidia.com/gpu") -> dict[str, str | None]:
        return {name: n["status"].get("allocatable", {}).get(resource) for name, n in self.nodes().items()}

    def labels(self, name: str) -> dict[str, str]:
        labels: dict[str, str] = self.nodes()[name]["metadata"].get("labels") or {}
        return labels

    def json(self, *args: str) -> Any:
        """``gpuplan ARGS -f SPEC`` in JSON (``--json``; a drift report ``--format json``), parsed."""
        form = ("--format", "json") if args[0] == "drift" else ("--json",)
        code, out = self.gpuplan(*args, "-f", str(self.spec), *form)
        assert code in (0, 2), out
        return json.loads(out)

    def pods_on(self, app: str) -> list[str]:
        """The nodes of the live pods labelled ``app``."""
        pods = self.writer.list_objects("v1", "Pod", label_selector=f"app={app}").items
        return sorted(
            p.manifest["spec"].get("nodeName", "") for p in pods if not p.metadata.get("deletionTimestamp")
        )

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def story(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    stories: list[Story] = []

    def start(cluster: Any) -> Story:
        stories.append(Story(cluster, tmp_path, capsys))
        return stories[-1]

    yield start
    for each in stories:
        each.close()


def sharing(strategy: str, replicas: int) -> str:
    return f"{{config: {{{strategy}: {{replicas: {replicas}}}}}}}"


def shared(labels: dict[str, str]) -> tuple[str | None, ...]:
    return tuple(
        labels.get(f"nvidia.com/{key}")
        for key in ("gpu.replicas", "gpu.sharing-strategy", "gpu.product", "mps.capable")
    )


def test_pools_with_their_own_device_plugin_configs(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any
) -> None:
    """An inference pool time-slices its GPUs, a lab pool shares them through MPS, a node of no pool keeps
    the stack's plain device plugin; then the inference pool's replicas go from 4 to 8."""
    cluster = cluster_factory(
        scenario(
            tmp_path,
            {"name": "infer-l40s", "gpu": {"model": "l40s", "count": 2}, "labels": {"pool": "inference"}},
            {"name": "lab-rtx", "gpu": {"model": "rtx-3060", "count": 1}, "labels": {"pool": "lab"}},
            {"name": "plain-l40s", "gpu": {"model": "l40s", "count": 2}},
        )
    )
    s: Story = story(cluster)

    def spec(replicas: int) -> str:
        pools = (
            f"[{{name: inference, nodeSelector: {{pool: inference}},"
            f" devicePlugin: {sharing('timeSlicing', replicas)}}},"
            f" {{name: lab, nodeSelector: {{pool: lab}}, devicePlugin: {sharing('mps', 2)}}}]"
        )
        return lab_spec(devicePlugin=PLUGIN, gfd=QUICK_GFD, nodePools=pools)

    s.apply(spec(4))
    assert s.allocatable() == {"infer-l40s": "8", "lab-rtx": "2", "plain-l40s": "2"}
    assert shared(s.labels("infer-l40s")) == ("4", "time-slicing", "NVIDIA-L40S-SHARED", "false")
    assert shared(s.labels("lab-rtx")) == ("2", "mps", "NVIDIA-GeForce-RTX-3060-SHARED", "true")
    assert shared(s.labels("plain-l40s")) == ("1", "none", "NVIDIA-L40S", "false")
    assert s.pods_on(MPS_DAEMON) == ["lab-rtx"]
    s.converged()

    s.apply(spec(8))
    assert s.allocatable() == {"infer-l40s": "16", "lab-rtx": "2", "plain-l40s": "2"}
    assert shared(s.labels("infer-l40s"))[:2] == ("8", "time-slicing")
    s.converged()


@pytest.mark.kubectl
def test_mig_repartitions_through_the_mig_manager(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any, kubectl: Kubectl
) -> None:
    """The stack's MIG config on an A100 node, a pool's own on an H100 node: the mig-manager repartitions
    each node's GPUs and the device plugin advertises the MIG devices. A hand-set MIG config label is drift
    that names kubectl; the next apply labels the node again. The plan of a profile change names the GPU pod
    the scheduler placed on a MIG device, and the change applies clean."""
    cluster = cluster_factory(
        scenario(
            tmp_path,
            {"name": "a100", "gpu": {"model": "a100-80gb", "count": 2}},
            {"name": "h100", "gpu": {"model": "h100-80gb", "count": 2}, "labels": {"pool": "training"}},
        )
    )
    s: Story = story(cluster)

    def spec(config: str) -> str:
        pools = "[{name: training, nodeSelector: {pool: training}, mig: {config: all-3g.40gb}}]"
        mig = f"{{strategy: mixed, config: {config}}}"
        return lab_spec(devicePlugin=PLUGIN, gfd=GFD, mig=mig, migManager="{owner: gpuplan}", nodePools=pools)

    s.apply(spec("all-1g.10gb"))
    nodes = s.nodes()
    assert nodes["a100"]["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "14"
    assert nodes["h100"]["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "4"
    for name, config in (("a100", "all-1g.10gb"), ("h100", "all-3g.40gb")):
        labels = nodes[name]["metadata"]["labels"]
        assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == (config, "success")
        assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert nodes["a100"]["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] == "14"
    s.converged()

    kubectl(
        "label", "node", "a100", "nvidia.com/mig.config=all-disabled", "--overwrite", kubeconfig=s.kubeconfig
    )
    # the mig-manager stops the device plugin while it repartitions; the DaemonSet controller starts it again
    # (the nodes' idleness does not cover a real controller's work: await the node's state)
    plugin_back = "jsonpath={.status.allocatable.nvidia\\.com/gpu}=2"
    kubectl("wait", "node/a100", f"--for={plugin_back}", "--timeout=60s", kubeconfig=s.kubeconfig)
    assert s.allocatable() == {"a100": "2", "h100": "0"}
    code, out = s.gpuplan("drift", "report", "-f", str(s.spec), "--format", "json")
    assert code == 2, out
    [finding] = [f for f in json.loads(out)["findings"] if f["component"] == "migManager"]
    assert (finding["kind"], finding["node"], finding["fields"]) == (
        "changed",
        "a100",
        [
            {
                "path": "metadata.labels.nvidia.com/mig.config",
                "before": "all-1g.10gb",
                "after": "all-disabled",
                "managers": ["kubectl-label"],
            }
        ],
    )
    s.apply(spec("all-1g.10gb"))
    assert s.nodes()["a100"]["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "14"
    s.converged()

    trainer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "image": "example.com/trainer:1",
                    "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
                }
            ]
        },
    }
    s.writer.create(trainer)
    bound = "jsonpath={.spec.nodeName}=a100"
    kubectl(
        "wait", "pod/trainer", "-n", "default", f"--for={bound}", "--timeout=60s", kubeconfig=s.kubeconfig
    )
    s.spec.write_text(spec("all-2g.20gb"))
    document = s.json("plan")
    [change] = [c for c in document["changes"] if c["address"].startswith("migManager/DaemonSet/")]
    assert change["disruptive"] and change["gpu_pods"] == {"a100": ["default/trainer"]}

    s.apply(spec("all-2g.20gb"))
    nodes = s.nodes()
    assert nodes["a100"]["status"]["allocatable"]["nvidia.com/mig-2g.20gb"] == "6"
    assert nodes["a100"]["status"]["allocatable"].get("nvidia.com/mig-1g.10gb", "0") == "0"
    assert nodes["a100"]["metadata"]["labels"]["nvidia.com/mig.config"] == "all-2g.20gb"
    assert nodes["h100"]["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "4"  # its pool's, unchanged
    s.converged()


def test_mps_shares_the_gpus_and_goes_away_again(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any
) -> None:
    cluster = cluster_factory(scenario(tmp_path, {"name": "l40s", "gpu": {"model": "l40s", "count": 2}}))
    s: Story = story(cluster)

    s.apply(lab_spec(devicePlugin=f"{{version: v0.20.1, {sharing('mps', 4)[1:]}", gfd=GFD))
    assert s.allocatable() == {"l40s": "8"}
    assert shared(s.labels("l40s")) == ("4", "mps", "NVIDIA-L40S-SHARED", "true")
    assert s.pods_on(MPS_DAEMON) == ["l40s"]
    daemons = {d.key.name: d.manifest["status"] for d in s.writer.list_objects("apps/v1", "DaemonSet").items}
    assert (daemons[MPS_DAEMON]["desiredNumberScheduled"], daemons[MPS_DAEMON]["numberReady"]) == (1, 1)
    [listed] = s.json("inventory")["nodes"]
    assert listed["sharing"] == {"strategy": "mps", "replicas": 4, "shared_gpus": 8}
    s.converged()

    s.apply(lab_spec(devicePlugin=PLUGIN, gfd=GFD))
    assert s.allocatable() == {"l40s": "2"}
    assert shared(s.labels("l40s")) == ("1", "none", "NVIDIA-L40S", "false")
    assert s.pods_on(MPS_DAEMON) == []
    s.converged()


def test_time_slicing_replicas_four_then_eight(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any
) -> None:
    cluster = cluster_factory(scenario(tmp_path, {"name": "rtx", "gpu": {"model": "rtx-3060", "count": 1}}))
    s: Story = story(cluster)

    def spec(replicas: int) -> str:
        return lab_spec(
            devicePlugin=f"{{version: v0.20.1, {sharing('timeSlicing', replicas)[1:]}", gfd=QUICK_GFD
        )

    s.apply(spec(4))
    assert s.allocatable() == {"rtx": "4"}
    assert shared(s.labels("rtx")) == ("4", "time-slicing", "NVIDIA-GeForce-RTX-3060-SHARED", "false")
    [listed] = s.json("inventory")["nodes"]
    assert listed["sharing"] == {"strategy": "time-slicing", "replicas": 4, "shared_gpus": 4}
    s.converged()

    s.apply(spec(8))
    assert s.allocatable() == {"rtx": "8"}
    assert shared(s.labels("rtx"))[:2] == ("8", "time-slicing")
    s.converged()


def test_each_pool_runs_and_upgrades_its_own_driver_release(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any
) -> None:
    """A V100 and an H100 node, each in its pool with its own containerised driver release: each node's
    driver pod is its pool's DaemonSet's and reports its pool's version; then the volta pool's release
    moves on, the hopper node's driver pod is left alone."""
    node = {"os": "ubuntu24.04", "kernel": "6.8.0-101-generic"}
    path = tmp_path / "scenario.yaml"
    nodes = [
        {"name": "v100", "gpu": {"model": "v100", "count": 2}, **node, "labels": {"pool": "volta"}},
        {"name": "h100", "gpu": {"model": "h100-80gb", "count": 2}, **node, "labels": {"pool": "hopper"}},
    ]
    path.write_text(json.dumps({"nodes": nodes, "timing": {"podReadySeconds": 0.01}}))
    s: Story = story(cluster_factory(str(path)))
    hopper, volta, newer = "595.91.07", "580.105.08", "580.126.09"

    def spec(volta: str) -> str:
        pools = (
            f'[{{name: volta, nodeSelector: {{pool: volta}}, driver: {{version: "{volta}"}}}},'
            f' {{name: hopper, nodeSelector: {{pool: hopper}}, driver: {{version: "{hopper}"}}}}]'
        )
        return lab_spec(
            driver=f'{{version: "{hopper}", healthTimeoutSeconds: 120}}', toolkit="{}", nodePools=pools
        )

    def driver_pods() -> dict[str, tuple[str, str, str]]:
        """node -> (owning DaemonSet, image, uid) of its live driver pod."""
        pods = s.writer.list_objects("v1", "Pod", label_selector="app=nvidia-driver-daemonset").items
        return {
            p.manifest["spec"]["nodeName"]: (
                p.metadata["ownerReferences"][0]["name"],
                p.manifest["spec"]["containers"][0]["image"],
                str(p.uid),
            )
            for p in pods
            if not p.metadata.get("deletionTimestamp")
        }

    def reported() -> dict[str, str | None]:
        return {name: s.labels(name).get("nvidia.com/cuda.driver-version.full") for name in ("v100", "h100")}

    s.apply(spec(volta))
    pods = driver_pods()
    assert {name: pod[:2] for name, pod in pods.items()} == {
        "v100": ("nvidia-driver-daemonset-volta", f"nvcr.io/nvidia/driver:{volta}-ubuntu24.04"),
        "h100": ("nvidia-driver-daemonset-hopper", f"nvcr.io/nvidia/driver:{hopper}-ubuntu24.04"),
    }
    assert reported() == {"v100": volta, "h100": hopper}
    s.converged()
    report = s.json("drift", "report")
    assert {n["name"]: (n["pool"], n["components"]["driver"]["status"]) for n in report["nodes"]} == {
        "v100": ("volta", "ok"),
        "h100": ("hopper", "ok"),
    }

    s.apply(spec(newer))
    assert reported() == {"v100": newer, "h100": hopper}
    after = driver_pods()
    assert after["v100"][1] == f"nvcr.io/nvidia/driver:{newer}-ubuntu24.04"
    assert after["h100"] == pods["h100"], "another pool's driver pod is not touched"
    s.converged()
