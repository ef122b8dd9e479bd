"""``gpuplan takeover`` on the ``gpu-operator`` scenario (the lab as GPU Operator v26.7.0 leaves it, driver
and toolkit on the host) and ``gpu-operator-bare`` (every operand the operator's): the operator stopped, its
operands adopted in place and brought to the spec, its ClusterPolicy removed so the next plan has nothing
left to do; ``gpuplan rollback`` gives everything back; a failed gate gives it back by itself; a kill -9
half-way is converged by the next run; bad input is one Error line.

The spec ``gpuplan init --from-clusterpolicy`` writes is of the operator's pod-template shape: no operand pod
restarts. ``SPEC`` is one of gpuplan's own shape, written by hand: its pods restart, as the plan says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from apply_process import gpuplan

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
SPEC = (
    HEADER + "  driver: {owner: external}\n  toolkit: {owner: external}\n"
    "  devicePlugin: {version: v0.20.0}\n  gfd: {version: v0.20.0}\n"
)
NAMESPACE = "gpu-operator"
DEPLOYMENT = ObjectKey("apps/v1", "Deployment", NAMESPACE, "gpu-operator")
POLICY = ObjectKey("nvidia.com/v1", "ClusterPolicy", None, "cluster-policy")
OPERANDS = (
    "nvidia-operator-validator",
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
)
HASH = "nvidia.com/last-applied-hash"


@pytest.fixture
def operator_sim(sim_factory: SimFactory) -> Simulator:
    sim = sim_factory("gpu-operator")
    assert sim.wait_idle(30), "the gpu-operator scenario did not settle"
    return sim


@pytest.fixture
def kubeconfig(operator_sim: Simulator, tmp_path: Path) -> Path:
    return operator_sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def writer(kubeconfig: Path) -> KubernetesWriter:
    return KubernetesWriter(kubeconfig=str(kubeconfig))


def write_spec(tmp_path: Path, text: str = SPEC) -> Path:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def pod_uids(writer: KubernetesWriter) -> dict[str, str]:
    """DaemonSet name -> the uid of its pod (one node)."""
    found = {}
    for pod in writer.list_pods(namespace=NAMESPACE):
        owner = (pod.metadata.get("ownerReferences") or [{}])[0]
        if owner.get("kind") == "DaemonSet":
            found[owner["name"]] = str(pod.uid)
    return found


def operand(writer: KubernetesWriter, name: str) -> dict[str, object]:
    live = writer.read(ObjectKey("apps/v1", "DaemonSet", NAMESPACE, name))
    assert live is not None, name
    return dict(live.metadata)


def replicas(writer: KubernetesWriter) -> int | None:
    live = writer.read(DEPLOYMENT)
    return None if live is None else int(live.manifest["spec"]["replicas"])


def assert_owned_by_the_operator(writer: KubernetesWriter, operands: tuple[str, ...] = OPERANDS) -> None:
    policy = writer.read(POLICY)
    assert policy is not None, "the ClusterPolicy is back"
    assert replicas(writer) == 1
    for name in operands:
        metadata = operand(writer, name)
        refs = metadata.get("ownerReferences") or []
        assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [  # type: ignore[index, union-attr]
            ("ClusterPolicy", "cluster-policy", policy.uid)
        ], name
        assert HASH in (metadata.get("annotations") or {}), name  # type: ignore[operator]
        assert "gpuplan.io/stack" not in (metadata.get("labels") or {}), name  # type: ignore[operator]


def all_pod_uids(writer: KubernetesWriter) -> dict[str, str]:
    """Every pod of the namespace, by name -> uid."""
    return {pod.key.name: str(pod.uid) for pod in writer.list_pods(namespace=NAMESPACE)}


def restarts_named(output: str) -> set[str]:
    return set(re.findall(r"pods restart: \w+/DaemonSet/gpu-operator/([\w-]+): its pod template", output))


SCENARIO_OPERANDS = {
    "gpu-operator": OPERANDS,
    "gpu-operator-bare": ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", *OPERANDS),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIO_OPERANDS))
def test_the_spec_init_writes_is_taken_over_with_no_pod_restarting(
    sim_factory: SimFactory, tmp_path: Path, scenario: str
) -> None:
    sim = sim_factory(scenario)
    assert sim.wait_idle(30), f"the {scenario} scenario did not settle"
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    spec = tmp_path / "gpustack.yaml"
    init = gpuplan(kubeconfig, "init", "--from-clusterpolicy", "-o", str(spec))
    assert init.returncode == 0, init.stderr
    before = all_pod_uids(writer)
    assert sorted(pod_uids(writer)) == sorted(SCENARIO_OPERANDS[scenario])

    done = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve", "--keep-operator")
    assert done.returncode == 0, done.stderr + done.stdout
    # only adoption: metadata and ownership, never a pod template or a selector
    assert "no pods restart: every pod template already matches the spec" in done.stdout
    assert not restarts_named(done.stdout)
    assert all_pod_uids(writer) == before
    assert replicas(writer) == 0 and writer.read(POLICY) is None
    for name in SCENARIO_OPERANDS[scenario]:
        live = writer.read(ObjectKey("apps/v1", "DaemonSet", NAMESPACE, name))
        assert live is not None and not live.metadata.get("ownerReferences"), name
        assert live.labels["gpuplan.io/stack"] == "gpustack", name  # gpuplan's labels: on the DaemonSet
        template = live.manifest["spec"]["template"]
        assert "gpuplan.io/stack" not in template["metadata"]["labels"], name
        assert [key for key in template["spec"]["nodeSelector"] if key.startswith("nvidia.com/gpu.deploy.")]

    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes" in plan.stdout and "Conflicts" not in plan.stdout
    drift = gpuplan(kubeconfig, "drift", "report", "-f", str(spec), "--no-telemetry", "--no-status")
    assert drift.returncode == 0, drift.stdout + drift.stderr  # each operand's pods found by its DaemonSet
    listed = gpuplan(kubeconfig, "inventory", "-f", str(spec), "--json")
    assert listed.returncode == 0, listed.stderr
    for row in json.loads(listed.stdout)["nodes"]:
        components = row["components"]  # the exporter and validator by their Ready pods' app label
        assert components["dcgm_exporter"] is True and components["validator"] is True, row

    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert back.returncode == 0, back.stderr + back.stdout
    assert_owned_by_the_operator(writer, SCENARIO_OPERANDS[scenario])
    # the templates were never changed, so giving them back restarts nothing either; the operator scaled up
    # finds its nvidia.com/last-applied-hash back on each operand and leaves it (the simulator runs no
    # operator reconcile: what a real one would re-render is the template it rendered before)
    assert all_pod_uids(writer) == before


def test_a_gpu_node_that_joins_after_the_takeover_is_labelled_for_the_operands(
    kubeconfig: Path, writer: KubernetesWriter, operator_sim: Simulator, tmp_path: Path
) -> None:
    """gpuplan is the node labeller the operator was: the deploy labels its templates select."""
    spec = tmp_path / "gpustack.yaml"
    assert gpuplan(kubeconfig, "init", "--from-clusterpolicy", "-o", str(spec)).returncode == 0
    assert gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve").returncode == 0
    before = all_pod_uids(writer)
    joining = {"name": "lab-node-2", "gpu": {"model": "rtx-3060", "count": 1}, "driver": "580.105.08"}
    operator_sim.add_node({**joining, "toolkit": "1.18.1"})
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "lack nvidia.com/gpu.deploy.device-plugin=true: apply labels them" in " ".join(plan.stdout.split())
    applied = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    node = writer.read(ObjectKey("v1", "Node", None, "lab-node-2"))
    assert node is not None
    for operand in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "operator-validator"):
        assert node.labels[f"nvidia.com/gpu.deploy.{operand}"] == "true", operand
    after = all_pod_uids(writer)
    assert {name: after[name] for name in before} == before  # the first node's pods are left alone
    placed = {
        (pod.manifest["spec"].get("nodeName"), (pod.metadata.get("ownerReferences") or [{}])[0].get("name"))
        for pod in writer.list_pods(namespace=NAMESPACE)
    }
    assert {("lab-node-2", name) for name in OPERANDS} <= placed


def test_a_spec_of_gpuplans_own_shape_restarts_the_pods_the_plan_names_and_rollback_gives_it_back(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path)
    before = pod_uids(writer)
    assert sorted(before) == sorted(OPERANDS)

    done = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve", "--keep-operator")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "1. scale Deployment gpu-operator/gpu-operator 1 -> 0 replicas" in done.stdout
    assert "<= devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset" in done.stdout
    assert "a helm upgrade of it would bring the ClusterPolicy back" in done.stdout
    # a pod restarts exactly when the plan said so, and the plan names the template's fields
    after = pod_uids(writer)
    restarted = {name for name in OPERANDS if after[name] != before[name]}
    assert restarted == restarts_named(done.stdout)
    assert "spec.template.spec.nodeSelector" in done.stdout
    # the operator stopped first and is kept at 0 (--keep-operator); its ClusterPolicy is gone
    assert replicas(writer) == 0
    assert writer.read(POLICY) is None
    for name in OPERANDS:
        metadata = operand(writer, name)
        assert not metadata.get("ownerReferences"), name
        assert HASH not in (metadata.get("annotations") or {}), name  # type: ignore[operator]
        # gpuplan owns the adopted fields: what its rendering leaves out went (nobody labels nodes
        # nvidia.com/gpu.deploy.* once the operator is stopped)
        live = writer.read(ObjectKey("apps/v1", "DaemonSet", NAMESPACE, name))
        assert live is not None
        selector = live.manifest["spec"]["template"]["spec"]["nodeSelector"]
        assert not [key for key in selector if key.startswith("nvidia.com/gpu.deploy.")], name
        assert "helm.sh/chart" not in live.labels, name
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert state["history"][-1]["outcome"] == "took over from the GPU Operator"
    assert state["operator_handover"]["replicas"] == 1

    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "No changes" in plan.stdout
    assert "Conflicts" not in plan.stdout

    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert back.returncode == 0, back.stderr + back.stdout
    assert "Returned to the GPU Operator" in back.stdout
    assert_owned_by_the_operator(writer)
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert "operator_handover" not in state
    assert not any(address.endswith(OPERANDS) for address in state["resources"])


def test_the_operator_is_deleted_by_default(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path)
    done = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve")
    assert done.returncode == 0, done.stderr + done.stdout
    assert replicas(writer) is None
    assert "Deleted ClusterPolicy cluster-policy and Deployment gpu-operator/gpu-operator." in done.stdout
    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert back.returncode == 0, back.stderr + back.stdout
    assert_owned_by_the_operator(writer)


def test_a_failed_gate_mid_takeover_gives_the_cluster_back_to_the_operator(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path
) -> None:
    broken = SPEC + "  dcgmExporter: {version: 4.99.0-4.8.3-distroless, healthTimeoutSeconds: 20}\n"
    spec = write_spec(tmp_path, broken)
    done = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Error: Takeover failed" in done.stderr
    assert "dcgmExporter" in done.stderr
    assert_owned_by_the_operator(writer)
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert "operator_handover" not in state
    assert not state["journal"]


@pytest.mark.parametrize(
    "kill_at",
    [
        1,  # right after the handover is recorded, before the operator is stopped
        12,  # half-way through the adoption, the device plugin's DaemonSet adopted already
        40,  # during the walk (each state write counts once per recorder: the walk's own comes second)
    ],
)
def test_a_takeover_killed_half_way_is_converged_by_the_next_run(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path, kill_at: int
) -> None:
    spec = write_spec(tmp_path)
    killed = gpuplan(
        kubeconfig, "takeover", "-f", str(spec), "--auto-approve", env={"GPUPLAN_TEST_KILL_AT": str(kill_at)}
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    again = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve")
    assert again.returncode == 0, again.stderr + again.stdout
    assert "An earlier takeover did not finish" in again.stdout
    assert writer.read(POLICY) is None and replicas(writer) is None
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert back.returncode == 0, back.stderr + back.stdout
    assert_owned_by_the_operator(writer)


def test_a_rollback_after_a_later_apply_returns_to_the_generation_before(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path)
    assert gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve").returncode == 0
    write_spec(tmp_path, SPEC + "  dcgmExporter: {env: [{name: GPUPLAN_TEST, value: changed}]}\n")
    applied = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert applied.returncode == 0, applied.stderr + applied.stdout
    back = gpuplan(kubeconfig, "rollback", "-f", str(spec), "--auto-approve")
    assert back.returncode == 0, back.stderr + back.stdout
    assert "Returned to the GPU Operator" not in back.stdout
    assert writer.read(POLICY) is None  # still gpuplan's: only the takeover's own generation gives it back


@pytest.mark.parametrize(
    ("replaced", "by", "named", "hint"),
    [
        # the operator runs GFD, the spec leaves it external
        ("  gfd: {version: v0.20.0}\n", "  gfd: {owner: external}\n",
         "the operator runs DaemonSet gpu-operator/gpu-feature-discovery (gfd)", "spec.gfd.owner: gpuplan"),
        # the spec deploys a toolkit, the operator runs none (toolkit.enabled=false)
        ("  toolkit: {owner: external}\n", "  toolkit: {version: v1.18.1}\n",
         "the spec renders DaemonSet gpu-operator/nvidia-container-toolkit-daemonset (toolkit)",
         "spec.toolkit.owner: external"),
    ],
)  # fmt: skip
def test_a_spec_that_does_not_match_the_operator_is_one_error_naming_it(
    kubeconfig: Path, writer: KubernetesWriter, tmp_path: Path, replaced: str, by: str, named: str, hint: str
) -> None:
    spec = write_spec(tmp_path, SPEC.replace(replaced, by))
    done = gpuplan(kubeconfig, "takeover", "-f", str(spec), "--auto-approve")
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    assert named in errors[0]
    assert hint in done.stderr
    assert "Traceback" not in done.stderr
    assert replicas(writer) == 1  # nothing was changed
    assert not (tmp_path / "gpuplan.state.json").exists()


def test_no_operator_is_one_error(lab_sim: Simulator, tmp_path: Path) -> None:
    kubeconfig = lab_sim.write_kubeconfig(tmp_path / "kubeconfig")
    done = gpuplan(kubeconfig, "takeover", "-f", str(write_spec(tmp_path)), "--auto-approve")
    assert done.returncode == 1
    assert done.stderr.startswith("Error: no GPU Operator found"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_plan_with_the_operators_conflicts_points_to_takeover_once_and_says_what_disabling_deletes(
    kubeconfig: Path, tmp_path: Path
) -> None:
    """Each of the operator's objects is a conflict; the way out they share, the takeover, is said once, and
    the per-component fix through the ClusterPolicy says that the operator then deletes running pods."""
    spec = write_spec(tmp_path)
    planned = gpuplan(kubeconfig, "plan", "-f", str(spec))
    assert planned.returncode == 0, planned.stderr
    flat = " ".join(planned.stdout.split())
    assert flat.count(f"gpuplan takeover -f {spec}") == 1
    assert "hands the GPU Operator's components over to gpuplan in place" in flat
    document = json.loads(gpuplan(kubeconfig, "plan", "-f", str(spec), "--json").stdout)
    assert len(document["conflicts"]) > 10
    patches = [
        resolution["summary"]
        for conflict in document["conflicts"]
        for resolution in conflict["resolutions"]
        if resolution["command"].startswith("kubectl patch clusterpolicy")
    ]
    assert patches and all("the operator deletes its running" in summary for summary in patches), patches
