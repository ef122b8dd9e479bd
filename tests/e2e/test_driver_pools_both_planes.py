"""Node pools with a driver release of their own, on the built-in control plane and on a real one: the day-2
steps after the first apply (plan, a second apply, ``drift report --remediate``, a rollback) of a spec whose
pool pins another driver than the stack.

Everything goes through the API and gpuplan's commands; after each apply ``plan --detailed-exitcode`` exits 0.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from apply_process import gpuplan
from lab_stack import lab_spec

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.testing import ClusterFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STACK, POOL = "580.105.08", "570.195.03"
APPLY_TIMEOUT = 300.0
IMAGE = "nvcr.io/nvidia/driver:{}-ubuntu24.04"
NODES = [f"gpu-node-{i}" for i in range(1, 5)]
OLD_POOL = (
    f'[{{name: old, nodeSelector: {{kubernetes.io/hostname: gpu-node-1}}, driver: {{version: "{POOL}"}}}}]'
)


def spec_text(*, pools: str | None, plugin: str = "v0.20.1") -> str:
    return lab_spec(
        driver=f'{{version: "{STACK}", healthTimeoutSeconds: 120}}',
        toolkit="{}",
        devicePlugin=f"{{version: {plugin}}}",
        nodePools=pools,
    )


def run_ok(kubeconfig: Path, *args: str) -> str:
    done = gpuplan(kubeconfig, *args, timeout=APPLY_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def no_changes(kubeconfig: Path, spec: Path) -> None:
    out = run_ok(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert "No changes. The cluster matches the configuration." in out, out


def applied(kubeconfig: Path, spec: Path, text: str) -> str:
    spec.write_text(text)
    out = run_ok(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    no_changes(kubeconfig, spec)
    return out


def driver_pods(kubeconfig: Path) -> dict[str, tuple[str, str]]:
    """node -> (owning DaemonSet, image) of its live driver pod."""
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        pods = writer.list_objects("v1", "Pod", label_selector="app=nvidia-driver-daemonset").items
        return {
            p.manifest["spec"]["nodeName"]: (
                p.metadata["ownerReferences"][0]["name"],
                p.manifest["spec"]["containers"][0]["image"],
            )
            for p in pods
            if not p.metadata.get("deletionTimestamp") and p.manifest["spec"].get("nodeName")
        }


def pooled() -> dict[str, tuple[str, str]]:
    """Where the pool runs its own driver release and the other nodes the stack's."""
    stack = ("nvidia-driver-daemonset", IMAGE.format(STACK))
    return {
        "gpu-node-1": ("nvidia-driver-daemonset-old", IMAGE.format(POOL)),
        **{f"gpu-node-{i}": stack for i in range(2, 5)},
    }


def test_a_driver_pool_survives_every_day_two_step(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    """The stack's driver owned at one release, a pool of one node at another: after the first apply the
    pool's own driver DaemonSet is never taken for a host driver, so the plan of the same spec is clean and
    apply, ``drift report --remediate`` and a rollback all succeed."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"

    applied(kubeconfig, spec, spec_text(pools=OLD_POOL))
    assert driver_pods(kubeconfig) == pooled()
    out = run_ok(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert "host driver" not in out, out
    no_changes(kubeconfig, spec)

    report = run_ok(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json")
    assert json.loads(report)["findings"] == []
    run_ok(kubeconfig, "drift", "report", "-f", str(spec), "--remediate")
    no_changes(kubeconfig, spec)

    applied(kubeconfig, spec, spec_text(pools=OLD_POOL, plugin="v0.20.0"))
    run_ok(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    spec.write_text(spec_text(pools=OLD_POOL))
    no_changes(kubeconfig, spec)
    assert driver_pods(kubeconfig) == pooled()


def timed_out(out: str) -> bool:
    """Whether a gate or a node step waited out its timeout (a rollback's spec diff names the timeoutSeconds
    fields it restores, which is no such thing)."""
    return "Timeout" in out.replace("TimeoutSeconds", "")


def driver_pod_uids(kubeconfig: Path) -> dict[str, str]:
    """node -> uid of its live driver pod."""
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        pods = writer.list_objects("v1", "Pod", label_selector="app=nvidia-driver-daemonset").items
        return {
            p.manifest["spec"]["nodeName"]: str(p.metadata["uid"])
            for p in pods
            if not p.metadata.get("deletionTimestamp") and p.manifest["spec"].get("nodeName")
        }


def test_a_driver_pool_joins_a_running_stack(cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    """A pool added to a stack that already runs its driver everywhere takes its node through the
    node-by-node path (cordon, GPU pods cleared, the stack's pod gone, the pool's pod Ready, uncordon) without
    waiting out a gate, and the nodes that stay keep their driver pods: the stack DaemonSet's template changed
    only in the node affinity that excludes the pool, which reaches no pod."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    stack = ("nvidia-driver-daemonset", IMAGE.format(STACK))

    applied(kubeconfig, spec, spec_text(pools=None))
    assert driver_pods(kubeconfig) == {f"gpu-node-{i}": stack for i in range(1, 5)}
    before = driver_pod_uids(kubeconfig)

    spec.write_text(spec_text(pools=OLD_POOL))
    preview = run_ok(kubeconfig, "plan", "-f", str(spec))
    assert "the driver restarts on" not in preview, preview
    out = applied(kubeconfig, spec, spec_text(pools=OLD_POOL))
    assert "Timeout" not in out, out
    assert "driver: node 1/1 gpu-node-1 upgrade-done" in out, out
    assert driver_pods(kubeconfig) == pooled()
    after = driver_pod_uids(kubeconfig)
    stayed = [f"gpu-node-{i}" for i in range(2, 5)]
    assert {node: after[node] for node in stayed} == {node: before[node] for node in stayed}

    # removed again: gpu-node-1 goes back to the stack's driver through cordon, drain and its new stack pod
    spec.write_text(spec_text(pools=None))
    preview = run_ok(kubeconfig, "plan", "-f", str(spec))
    assert "the driver restarts on 1 node (gpu-node-1), node by node" in preview, preview
    assert "at once" not in preview, preview
    assert "the driver restarts on 4 nodes" not in preview, preview
    gone = run_ok(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    no_changes(kubeconfig, spec)
    assert not timed_out(gone), gone
    assert "driver: node 1/1 gpu-node-1 upgrade-done" in gone, gone
    assert driver_pods(kubeconfig) == {f"gpu-node-{i}": stack for i in range(1, 5)}
    assert {node: driver_pod_uids(kubeconfig)[node] for node in stayed} == {
        node: before[node] for node in stayed
    }

    # added once more, then rolled back to the generation without the pool: the same way back
    applied(kubeconfig, spec, spec_text(pools=OLD_POOL))
    assert driver_pods(kubeconfig) == pooled()
    back = run_ok(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert not timed_out(back), back
    assert "driver: node 1/1 gpu-node-1 upgrade-done" in back, back
    spec.write_text(spec_text(pools=None))
    no_changes(kubeconfig, spec)
    assert driver_pods(kubeconfig) == {f"gpu-node-{i}": stack for i in range(1, 5)}
    assert {node: driver_pod_uids(kubeconfig)[node] for node in stayed} == {
        node: before[node] for node in stayed
    }


def test_one_pools_driver_upgrade_and_a_rollback_to_the_first_generation(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """Generation 1 runs the pool's driver at one release; generation 2 upgrades the pool alone, node by
    node, leaving the stack's driver pods as they are; ``rollback --to 1`` takes the pool back, gated by
    generation 1's spec, and says that the spec file still asks for generation 2's release."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    newer = "570.211.01"

    applied(kubeconfig, spec, spec_text(pools=OLD_POOL))
    before = driver_pod_uids(kubeconfig)
    stayed = [f"gpu-node-{i}" for i in range(2, 5)]

    upgraded = applied(kubeconfig, spec, spec_text(pools=OLD_POOL.replace(POOL, newer)))
    assert not timed_out(upgraded), upgraded
    assert "driver: node 1/1 gpu-node-1 upgrade-done" in upgraded, upgraded
    assert driver_pods(kubeconfig) == {
        **pooled(),
        "gpu-node-1": ("nvidia-driver-daemonset-old", IMAGE.format(newer)),
    }
    assert {node: driver_pod_uids(kubeconfig)[node] for node in stayed} == {
        node: before[node] for node in stayed
    }

    back = run_ok(kubeconfig, "rollback", "-f", str(spec), "--to", "1", "--auto-approve")
    assert not timed_out(back), back
    assert "driver: node 1/1 gpu-node-1 upgrade-done" in back, back
    assert f"spec.nodePools[0].driver.version: {newer} (generation 1: {POOL})" in back, back
    assert driver_pods(kubeconfig) == pooled()
    assert {node: driver_pod_uids(kubeconfig)[node] for node in stayed} == {
        node: before[node] for node in stayed
    }
    spec.write_text(spec_text(pools=OLD_POOL))
    no_changes(kubeconfig, spec)


def test_kill_9_between_a_pools_hand_back_and_the_stacks_update_converges(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """The apply that removes a driver pool is killed (SIGKILL) right after it deleted the pool's DaemonSet,
    the pool's node cordoned without a driver, before the stack's DaemonSet takes it back. The next apply
    does not take that node's last reported driver for a host driver: it finishes the hand-back (the
    stack's pod there, gated, the node uncordoned) and the plan after it is clean."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    applied(kubeconfig, spec, spec_text(pools=OLD_POOL))

    spec.write_text(spec_text(pools=None))
    # the second state write of the apply: the pool DaemonSet's deletion done (the first: it is pending)
    killed = gpuplan(
        kubeconfig,
        "apply",
        "-f",
        str(spec),
        "--auto-approve",
        env={"GPUPLAN_TEST_KILL_AT": "2"},
        timeout=APPLY_TIMEOUT,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert "pod-restart-required: nvidia-driver-daemonset-old is deleted" in killed.stdout, killed.stdout
    assert "gpu-node-1" not in driver_pods(kubeconfig)

    resumed = run_ok(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert "host driver" not in resumed and not timed_out(resumed), resumed
    assert "gpu-node-1 upgrade-done" in resumed, resumed
    no_changes(kubeconfig, spec)
    stack = ("nvidia-driver-daemonset", IMAGE.format(STACK))
    assert driver_pods(kubeconfig) == {f"gpu-node-{i}": stack for i in range(1, 5)}
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        node = writer.read(ObjectKey("v1", "Node", "", "gpu-node-1"))
        assert node is not None and not node.manifest["spec"].get("unschedulable"), "uncordoned"


H100 = "NVIDIA-H100-80GB-HBM3"
MODEL_POOL = (
    f'[{{name: hopper, nodeSelector: {{nvidia.com/gpu.product: {H100}}}, driver: {{version: "{POOL}"}}}}]'
)


def pool_labels(kubeconfig: Path) -> dict[str, str | None]:
    """node -> its gpuplan.io/pool label (None: absent)."""
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        nodes = writer.list_objects("v1", "Node").items
        return {str(n.key.name): n.metadata.get("labels", {}).get("gpuplan.io/pool") for n in nodes}


def test_a_driver_pool_by_gpu_model_takes_its_nodes_and_gives_them_back(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """A pool selecting ``nvidia.com/gpu.product`` with a driver of its own: gpuplan labels its nodes
    ``gpuplan.io/pool`` (the product read from NFD's PCI id, whatever GFD says since), the pool's DaemonSet
    selects that label, and the stack's excludes it, so the pool's driver reaches the four H100 nodes node by
    node. Removed, the nodes go back to the stack's driver the same way, the label last."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    stack = ("nvidia-driver-daemonset", IMAGE.format(STACK))
    hopper = ("nvidia-driver-daemonset-hopper", IMAGE.format(POOL))

    applied(kubeconfig, spec, spec_text(pools=None))
    assert driver_pods(kubeconfig) == dict.fromkeys(NODES, stack)

    joined = applied(kubeconfig, spec, spec_text(pools=MODEL_POOL))
    assert not timed_out(joined), joined
    assert "GPU Feature Discovery writes only once a driver runs" not in joined, joined
    for node in NODES:
        assert f"driver: node {node} upgrade-done" in joined.replace(
            f"node {NODES.index(node) + 1}/4 ", "node "
        ), joined
    assert driver_pods(kubeconfig) == dict.fromkeys(NODES, hopper)
    assert pool_labels(kubeconfig) == dict.fromkeys(NODES, "hopper")

    left = applied(kubeconfig, spec, spec_text(pools=None))
    assert not timed_out(left), left
    assert driver_pods(kubeconfig) == dict.fromkeys(NODES, stack)
    assert pool_labels(kubeconfig) == dict.fromkeys(NODES)


def test_a_first_apply_with_a_driver_pool_by_gpu_model(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """No GFD label yet on any node: the pool's nodes are known from NFD's PCI id, labelled first, and get
    the pool's driver from the start; the stack's DaemonSet places nothing there."""
    cluster: Any = cluster_factory("upgrade4")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    out = applied(kubeconfig, spec, spec_text(pools=MODEL_POOL))
    assert not timed_out(out) and "cordon" not in out, out
    assert driver_pods(kubeconfig) == dict.fromkeys(
        NODES, ("nvidia-driver-daemonset-hopper", IMAGE.format(POOL))
    )
    assert pool_labels(kubeconfig) == dict.fromkeys(NODES, "hopper")
