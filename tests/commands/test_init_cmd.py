"""`gpuplan init --from-cluster`: a commented starter gpustack.yaml that validates and plans on the lab and
mixed clusters; the lab's hand-deployed device plugin, a GPU Operator ClusterPolicy and another stack's
DaemonSets are left external with their ways out in comments; host drivers that differ across nodes leave
the driver's version out and suggest node pools in comments only; -o refuses an existing file without
--force; bad input is one Error: line."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_stack import lab_spec

from gpuplan import errors
from gpuplan.cli import run
from gpuplan.planner.spec import model as spec_mod
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

Invoke = Callable[..., tuple[int, str, str]]
PLUGIN_AND_GFD = lab_spec(gfd="{version: v0.20.1}", dcgmExporter="{owner: none}", validator="{owner: none}")
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


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Invoke:
    def call(*argv: str) -> tuple[int, str, str]:
        code = run(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def started(sim_factory: SimFactory, data: Any, tmp_path: Path) -> tuple[Simulator, Path]:
    sim = sim_factory(data)
    assert sim.wait_idle(60), "the scenario did not settle"
    return sim, sim.write_kubeconfig(tmp_path / "kubeconfig")


def with_stack(name: str, spec_text: str) -> dict[str, Any]:
    """Built-in scenario ``name`` running the objects ``spec_text`` renders (GFD labels the nodes)."""
    data: dict[str, Any] = yaml.safe_load(scenario_mod.load_scenario(name).model_dump_json(exclude_none=True))
    stack = spec_mod.parse_spec(spec_text, filename="gpustack.yaml")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stack.spec.namespace}}
    data["objects"] = [
        *data.get("objects", []),
        namespace,
        *(dict(o.manifest) for o in stack.desired_objects()),
    ]
    return data


def init_validate_plan(invoke: Invoke, kubeconfig: Path, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``init`` to stdout, then the same to -o; the file validates and plans (exit 0 or 2, never 1)."""
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "init", "--from-cluster")
    assert (code, err) == (0, ""), err
    target = tmp_path / "gpustack.yaml"
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "init", "--from-cluster", "-o", str(target))
    assert code == 0, err
    assert target.read_text() == out, "-o writes what stdout shows"
    code, _, err = invoke("validate", "-f", str(target))
    assert code == 0, err
    state = tmp_path / "gpuplan.state.json"
    code, plan_out, err = invoke(
        "--kubeconfig",
        str(kubeconfig),
        "plan",
        "-f",
        str(target),
        "--state",
        str(state),
        "--detailed-exitcode",
    )
    assert code in (0, 2), plan_out + err
    return out, yaml.safe_load(out)


def flat(text: str) -> str:
    """The comments as one line: a phrase is found wherever the wrapping broke it."""
    return " ".join(line.strip().lstrip("#").strip() for line in text.splitlines())


def test_lab_keeps_the_hand_deployed_plugin_external(
    lab_sim: Simulator, kubeconfig: Path, invoke: Invoke, tmp_path: Path
) -> None:
    text, spec = init_validate_plan(invoke, kubeconfig, tmp_path)
    components = spec["spec"]
    assert components["driver"] == {"owner": "external"}, "no node reports the version before GFD runs"
    assert components["toolkit"] == {"owner": "external"}
    assert components["devicePlugin"] == {"owner": "external"}
    assert components["gfd"] == components["dcgmExporter"] == components["validator"] == {}
    # "gpuplan's", as the comment says: {} means owned for every component (design §8.3)
    assert spec_mod.parse_spec(text, filename="gpustack.yaml").spec.mig_manager.owner == "gpuplan"
    assert "  migManager: {}    # gpuplan's" in text
    assert (
        "DaemonSet kube-system/nvidia-device-plugin-daemonset, owned by nobody: it was deployed by hand"
        in flat(text)
    )
    assert (
        "gpuplan import -f gpustack.yaml devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset "
        "DaemonSet/kube-system/nvidia-device-plugin-daemonset" in flat(text)
    )
    assert "owner: none" in flat(text) and "lab-node" in flat(text)
    assert all(len(line) <= 110 for line in text.splitlines() if "gpuplan import" not in line)


def test_mixed_plans_and_names_its_nodes(sim_factory: SimFactory, invoke: Invoke, tmp_path: Path) -> None:
    _, kubeconfig = started(sim_factory, "mixed", tmp_path)
    text, spec = init_validate_plan(invoke, kubeconfig, tmp_path)
    assert spec["spec"]["devicePlugin"] == {} and spec["spec"]["driver"] == {"owner": "external"}
    for node in ("a100-node", "h100-node", "l40s-node", "rtx-node"):
        assert node in text


def test_mixed_drivers_differ_no_version_and_pools_only_as_comments(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path
) -> None:
    _, kubeconfig = started(sim_factory, with_stack("mixed", PLUGIN_AND_GFD), tmp_path)
    text, spec = init_validate_plan(invoke, kubeconfig, tmp_path)
    assert spec["spec"]["driver"] == {"owner": "external"}, "differing host drivers: each node's as it is"
    assert "nodePools" not in spec["spec"], "pools are only a commented suggestion"
    assert "host drivers differ across the GPU nodes" in flat(text)
    assert "  #   - name: driver-570-195-03" in text and '#     driver: {version: "580.105.08"}' in text
    assert "a100-80gb x8: 1 node(s) (a100-node)" in flat(text) and "rtx-3060 x1" in flat(text)
    assert spec["spec"]["devicePlugin"] == {"owner": "external"}, "another stack's device plugin runs"
    assert "gpuplan stack lab" in flat(text)
    kubeconfig_args = ("--kubeconfig", str(kubeconfig), "init", "--from-cluster", "--name", "lab")
    code, own, err = invoke(*kubeconfig_args)
    assert code == 0, err
    assert yaml.safe_load(own)["spec"]["devicePlugin"] == {}, "the stack's own objects are no other owner's"


def test_cluster_policy_components_are_external_with_the_patch(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path
) -> None:
    data: dict[str, Any] = yaml.safe_load(
        scenario_mod.load_scenario("lab").model_dump_json(exclude_none=True)
    )
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {k: {"enabled": False} for k in ("driver", "toolkit", "devicePlugin", "dcgmExporter")},
    }
    data["objects"] = [*data["objects"], copy.deepcopy(CLUSTER_POLICY_CRD), policy]
    _, kubeconfig = started(sim_factory, data, tmp_path)
    text, spec = init_validate_plan(invoke, kubeconfig, tmp_path)
    assert spec["spec"]["gfd"] == spec["spec"]["validator"] == {"owner": "external"}
    assert spec["spec"]["dcgmExporter"] == {}
    assert "the GPU Operator (ClusterPolicy cluster-policy)" in flat(text)
    assert "kubectl patch clusterpolicy cluster-policy --type merge" in flat(text)


def test_existing_file_unwritable_path_and_unreachable_cluster(
    lab_sim: Simulator, kubeconfig: Path, invoke: Invoke, tmp_path: Path
) -> None:
    mine = tmp_path / "gpustack.yaml"
    mine.write_text("# mine\n")
    base = ("--kubeconfig", str(kubeconfig), "init", "--from-cluster")
    code, out, err = invoke(*base, "-o", str(mine))
    assert (code, out) == (errors.EXIT_ERROR, "") and err.startswith("Error: ") and "--force" in err
    assert mine.read_text() == "# mine\n"
    code, _, err = invoke(*base, "-o", str(mine), "--force")
    assert code == 0 and mine.read_text().startswith("# A starter gpustack.yaml")
    code, _, err = invoke(*base, "-o", str(tmp_path / "missing" / "gpustack.yaml"))
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and "folder does not exist" in err
    code, _, err = invoke(*base, "-o", str(mine / "gpustack.yaml"))
    assert code == errors.EXIT_ERROR and "a part of the path is a file" in err
    code, _, err = invoke("init")
    assert code == errors.EXIT_USAGE and "--from-cluster" in err
    lab_sim.stop()
    code, _, err = invoke(*base, "-o", str(tmp_path / "missing" / "gpustack.yaml"))
    assert "folder does not exist" in err, "the path is checked before the cluster is read"
    code, out, err = invoke(*base, "-o", str(tmp_path / "new.yaml"))
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and "Traceback" not in err
    assert not (tmp_path / "new.yaml").exists()
