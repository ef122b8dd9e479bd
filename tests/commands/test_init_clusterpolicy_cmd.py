"""`gpuplan init --from-clusterpolicy [--values FILE]`: the spec equivalent to a GPU Operator ClusterPolicy
read from the cluster (its NVIDIADriver CRs as the driver and node pools), or to a gpu-operator chart values
file laid over the chart's v26.7.0 defaults; it validates and plans; what gpuplan cannot carry is listed in
comments and on stderr; bad input is one Error: line."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan import errors
from gpuplan.cli import run
from gpuplan.planner.observe import clusterpolicy
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

Invoke = Callable[..., tuple[int, str, str]]


def crd(plural: str, kind: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.nvidia.com"},
        "spec": {
            "group": "nvidia.com",
            "scope": "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


# the ClusterPolicy Helm renders (gpu-operator v26.7.0, facts §1.1, §1.3), with settings changed
POLICY_SPEC: dict[str, Any] = {
    "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
    "daemonsets": {
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "updateStrategy": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "1"},
        "labels": {"team": "ml"},
    },
    "driver": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "580.105.08",
        "kernelModuleType": "open",
        "imagePullPolicy": "Always",
        "imagePullSecrets": ["ngc-secret"],
        "manager": {
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-driver-manager",
            "version": "v0.12.0",
        },
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": 2,
            "maxUnavailable": "25%",
            "drain": {"enable": True, "timeoutSeconds": 600},
        },
        "startupProbe": {"initialDelaySeconds": 60, "periodSeconds": 10},
    },
    "toolkit": {
        "enabled": True,
        "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
        "installDir": "/usr/local/nvidia",
    },
    "devicePlugin": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
        "config": {"name": "time-slicing-config", "default": "any"},
        "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}],
        "resources": {"limits": {"memory": "512Mi"}},
    },
    "gfd": {
        "enabled": True,
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
    },
    "dcgmExporter": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/k8s",
        "image": "dcgm-exporter",
        "version": "4.6.0-4.8.3-distroless",
        "config": {"name": "custom-metrics"},
        "service": {"internalTrafficPolicy": "Local"},
        "serviceMonitor": {"enabled": True, "interval": "15s"},
        "args": ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv"],
    },
    "dcgm": {"enabled": False},
    "nodeStatusExporter": {"enabled": False},
    "validator": {
        "repository": "nvcr.io/nvidia",
        "image": "gpu-operator",
        "version": "v26.7.0",
        "plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]},
    },
    "mig": {"strategy": "mixed"},
    "migManager": {
        "enabled": True,
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "k8s-mig-manager",
        "version": "v0.15.0",
        "config": {"name": "custom-mig-parted-config", "default": "all-disabled"},
        "env": [{"name": "WITH_REBOOT", "value": "false"}],
    },
    "cdi": {"enabled": True, "nriPluginEnabled": False},
    "gds": {"enabled": False},
    "sandboxWorkloads": {"enabled": False, "defaultWorkload": "container"},
}


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Invoke:
    def call(*argv: str) -> tuple[int, str, str]:
        code = run(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def lab_with(*objects: dict[str, Any]) -> dict[str, Any]:
    """The lab scenario without its hand-deployed device plugin, with ``objects``."""
    data: dict[str, Any] = yaml.safe_load(
        scenario_mod.load_scenario("lab").model_dump_json(exclude_none=True)
    )
    data["objects"] = [copy.deepcopy(o) for o in objects]
    return data


def started(sim_factory: SimFactory, data: Any, tmp_path: Path) -> tuple[Simulator, Path]:
    sim = sim_factory(data)
    assert sim.wait_idle(60), "the scenario did not settle"
    return sim, sim.write_kubeconfig(tmp_path / "kubeconfig")


def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}


def validates_and_plans(invoke: Invoke, spec_file: Path, kubeconfig: Path, tmp_path: Path) -> str:
    code, _, err = invoke("validate", "-f", str(spec_file))
    assert code == 0, err
    code, out, err = invoke(
        "--kubeconfig",
        str(kubeconfig),
        "plan",
        "-f",
        str(spec_file),
        "--state",
        str(tmp_path / "gpuplan.state.json"),
        "--detailed-exitcode",
    )
    assert code in (0, 2), out + err
    return out


def test_cluster_policy_key_by_key(sim_factory: SimFactory, invoke: Invoke, tmp_path: Path) -> None:
    _, kubeconfig = started(
        sim_factory,
        lab_with(crd("clusterpolicies", "ClusterPolicy", "v1"), policy("cluster-policy", POLICY_SPEC)),
        tmp_path,
    )
    target = tmp_path / "gpustack.yaml"
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "init", "--from-clusterpolicy", "-o", str(target))
    assert code == 0, err
    text = target.read_text()
    spec = yaml.safe_load(text)["spec"]
    assert spec["namespace"] == "gpu-operator"
    assert spec["daemonsets"] == {
        "podTemplate": "gpu-operator",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
        "labels": {"team": "ml"},
        "updateStrategy": "RollingUpdate",
        "maxUnavailable": "1",
    }
    assert spec["mig"] == {"strategy": "mixed"} and spec["cdi"] == {"enabled": True}
    assert spec["driver"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "580.105.08",
        "imagePullPolicy": "Always",
        "imagePullSecrets": ["ngc-secret"],
        "kernelModuleType": "open",
        "manager": {
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-driver-manager",
            "version": "v0.12.0",
        },
        "upgradePolicy": {
            "maxParallelUpgrades": 2,
            "maxUnavailable": "25%",
            "drain": {"enable": True, "timeoutSeconds": 600},
        },
    }
    assert spec["toolkit"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.20.0",
        "installDir": "/usr/local/nvidia",
    }, "a full image path is split as imagePath() reads it"
    assert spec["devicePlugin"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
        "env": [{"name": "PASS_DEVICE_SPECS", "value": "true"}],
        "resources": {"limits": {"memory": "512Mi"}},
        "config": {"name": "time-slicing-config", "default": "any"},
    }
    assert spec["gfd"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.20.0",
    }
    assert spec["dcgmExporter"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia/k8s",
        "image": "dcgm-exporter",
        "version": "4.6.0-4.8.3-distroless",
        "args": ["-f", "/etc/dcgm-exporter/dcp-metrics-included.csv"],
        "metricsConfigMap": "custom-metrics",
        "internalTrafficPolicy": "Local",
    }
    assert spec["validator"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia",
        "image": "gpu-operator",
        "version": "v26.7.0",
    }
    assert spec["migManager"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia/cloud-native",
        "image": "k8s-mig-manager",
        "version": "v0.15.0",
        "env": [{"name": "WITH_REBOOT", "value": "false"}],
        "config": {"name": "custom-mig-parted-config"},
    }
    header = text.split("apiVersion:")[0]
    for lost in ("operator:", "driver.startupProbe:", "dcgmExporter.serviceMonitor:", "validator.plugin:"):
        assert f"#   {lost}" in header, lost
    for off in ("dcgm:", "gds:", "sandboxWorkloads:", "nodeStatusExporter:", "cdi.nriPluginEnabled"):
        assert off not in header, f"{off} is off: nothing is lost"
    assert "not carried over" in err and "driver.startupProbe" in err
    validates_and_plans(invoke, target, _bare_lab(sim_factory, tmp_path), tmp_path)
    # against the operator's own cluster the plan is shown, its one other owner the ClusterPolicy
    out = validates_and_plans(invoke, target, kubeconfig, tmp_path)
    assert "ClusterPolicy cluster-policy already runs it" in out


def _bare_lab(sim_factory: SimFactory, tmp_path: Path) -> Path:
    """A lab without the operator: the spec must plan there (what it plans against the operator's own
    objects depends on how close gpuplan's rendering is to the operator's)."""
    (tmp_path / "bare").mkdir()
    return started(sim_factory, lab_with(), tmp_path / "bare")[1]


def test_disabled_driver_and_toolkit_are_the_hosts_and_others_none(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path
) -> None:
    spec = {k: {"enabled": False} for k in ("driver", "toolkit", "dcgmExporter", "migManager")}
    _, kubeconfig = started(
        sim_factory,
        lab_with(crd("clusterpolicies", "ClusterPolicy", "v1"), policy("cluster-policy", spec)),
        tmp_path,
    )
    code, out, err = invoke("--kubeconfig", str(kubeconfig), "init", "--from-clusterpolicy")
    assert code == 0, err
    got = yaml.safe_load(out)["spec"]
    assert got["driver"] == got["toolkit"] == {"owner": "external"}
    assert got["dcgmExporter"] == got["migManager"] == {"owner": "none"}
    assert got["devicePlugin"] == got["gfd"] == {"owner": "gpuplan"}, "enabled by the CRD's default"


def test_nvidia_driver_crs_are_the_driver_and_node_pools(
    sim_factory: SimFactory, invoke: Invoke, tmp_path: Path
) -> None:
    spec = {"driver": {"enabled": True, "useNvidiaDriverCRD": True}}
    default = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "default"},
        "spec": {
            "default": True,
            "driverType": "gpu",
            "repository": "nvcr.io/nvidia",
            "image": "driver",
            "version": "595.91.07",
        },
    }
    volta = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "volta"},
        "spec": {
            "driverType": "gpu",
            "image": "nvcr.io/nvidia/driver",
            "version": "580.105.08",
            "nodeSelector": {"nvidia.com/gpu.family": "volta"},
        },
    }
    objects = (
        crd("clusterpolicies", "ClusterPolicy", "v1"),
        crd("nvidiadrivers", "NVIDIADriver", "v1alpha1"),
        policy("cluster-policy", spec),
        default,
        volta,
    )
    _, kubeconfig = started(sim_factory, lab_with(*objects), tmp_path)
    target = tmp_path / "gpustack.yaml"
    code, _, err = invoke("--kubeconfig", str(kubeconfig), "init", "--from-clusterpolicy", "-o", str(target))
    assert code == 0, err
    text = target.read_text()
    got = yaml.safe_load(text)["spec"]
    assert got["driver"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "595.91.07",
    }
    assert got["nodePools"] == [
        {
            "name": "volta",
            "nodeSelector": {"nvidia.com/gpu.family": "volta"},
            "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "580.105.08"},
        }
    ]
    code, _, err = invoke("validate", "-f", str(target))
    assert code == 0, err


VALUES = """\
driver:
  enabled: false
  nvidiaDriverCRD: {enabled: false}
toolkit:
  env:
    - {name: CONTAINERD_SOCKET, value: /run/k3s/containerd/containerd.sock}
devicePlugin:
  config: {name: time-slicing-config, default: any, create: true, data: {any: "version: v1"}}
migManager:
  config: {default: all-1g.10gb}
mig: {strategy: mixed}
daemonsets:
  rollingUpdate: {maxUnavailable: 2}
nfd: {enabled: true}
gds: {enabled: true}
"""


def test_values_file_over_the_chart_defaults(sim_factory: SimFactory, invoke: Invoke, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    target = tmp_path / "gpustack.yaml"
    code, _, err = invoke("init", "--from-clusterpolicy", "--values", str(values), "-o", str(target))
    assert code == 0, err
    text = target.read_text()
    spec = yaml.safe_load(text)["spec"]
    assert spec["driver"] == {"owner": "external"}
    assert spec["toolkit"] == {
        "owner": "gpuplan",
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.20.0",
        "env": [{"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}],
    }, "the chart's v26.7.0 default version, the file's env"
    assert spec["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    assert spec["devicePlugin"]["version"] == spec["gfd"]["version"] == "v0.20.0"
    assert spec["mig"] == {"strategy": "mixed", "config": "all-1g.10gb"}
    assert spec["migManager"]["owner"] == "gpuplan"
    assert spec["daemonsets"]["maxUnavailable"] == "2"
    # the chart's operand labels (templates/_helpers.tpl), which its ClusterPolicy puts on every operand pod
    assert spec["daemonsets"]["labels"] == {
        "helm.sh/chart": "gpu-operator-v26.7.0",
        "app.kubernetes.io/managed-by": "gpu-operator",
    }
    assert spec["daemonsets"]["podTemplate"] == "gpu-operator"
    header = text.split("apiVersion:")[0]
    assert "#   nfd:" in header and "#   gds:" in header and "devicePlugin.config.data" in header
    assert "not carried over" in err
    assert "MIG-capable nodes only" in " ".join(line.lstrip("# ") for line in header.splitlines())
    code, _, err = invoke("validate", "-f", str(target))
    assert code == 0, err
    # without a MIG geometry the lab's RTX 3060 takes the spec: it plans
    values.write_text(VALUES.replace("config: {default: all-1g.10gb}", "enabled: false"))
    code, _, err = invoke(
        "init", "--from-clusterpolicy", "--values", str(values), "-o", str(target), "--force"
    )
    assert code == 0, err
    validates_and_plans(invoke, target, _bare_lab(sim_factory, tmp_path), tmp_path)


def test_bad_input_is_one_error_line(
    sim_factory: SimFactory, lab_sim: Simulator, kubeconfig: Path, invoke: Invoke, tmp_path: Path
) -> None:
    base = ("--kubeconfig", str(kubeconfig), "init", "--from-clusterpolicy")
    code, out, err = invoke(*base)
    assert (code, out) == (errors.EXIT_ERROR, "")
    assert err.startswith("Error: no ClusterPolicy (clusterpolicies.nvidia.com/v1") and "--values" in err
    assert len(err.strip().splitlines()) <= 2, err
    bad = tmp_path / "values.yaml"
    bad.write_text("driver:\n  enabled: [false\n")
    code, _, err = invoke("init", "--from-clusterpolicy", "--values", str(bad))
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and f"{bad}:3:" in err, err
    bad.write_text("- a list\n")
    code, _, err = invoke("init", "--from-clusterpolicy", "--values", str(bad))
    assert code == errors.EXIT_ERROR and f"{bad}:1:1" in err and "mapping" in err, err
    mine = tmp_path / "gpustack.yaml"
    mine.write_text("# mine\n")
    code, _, err = invoke(
        "init", "--from-clusterpolicy", "--values", str(tmp_path / "v.yaml"), "-o", str(mine)
    )
    assert code == errors.EXIT_ERROR and "--force" in err and mine.read_text() == "# mine\n"
    code, _, err = invoke("init", "--from-clusterpolicy", "--values", str(tmp_path / "absent.yaml"))
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and "Traceback" not in err
    code, _, err = invoke("init", "--values", str(bad))
    assert code == errors.EXIT_USAGE and "--from-clusterpolicy" in err
    code, _, err = invoke("init", "--from-cluster", "--from-clusterpolicy")
    assert code == errors.EXIT_USAGE
    two = lab_with(crd("clusterpolicies", "ClusterPolicy", "v1"), policy("a", {}), policy("b", {}))
    (tmp_path / "two").mkdir()
    _, two_config = started(sim_factory, two, tmp_path / "two")
    code, _, err = invoke("--kubeconfig", str(two_config), "init", "--from-clusterpolicy")
    assert code == errors.EXIT_ERROR and err.startswith("Error: 2 ClusterPolicies") and "(a, b)" in err, err
    lab_sim.stop()
    code, _, err = invoke(*base)
    assert code == errors.EXIT_ERROR and err.startswith("Error: ") and "Traceback" not in err


def test_values_with_the_nvidiadriver_crd_keep_the_drivers_section(invoke: Invoke, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("driver:\n  version: 580.105.08\n  nvidiaDriverCRD: {enabled: true}\n")
    code, out, err = invoke("init", "--from-clusterpolicy", "--values", str(values))
    assert code == 0, err
    driver = yaml.safe_load(out)["spec"]["driver"]
    assert (driver["owner"], driver["version"]) == ("gpuplan", "580.105.08"), (
        "the chart's default CR is driver.*"
    )


def test_what_gpuplan_rejects_is_listed_and_the_file_still_validates(invoke: Invoke, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "devicePlugin: {version: latest}\n"
        "gfd: {repository: '', version: '', image: registry.local:5000/nvidia/k8s-device-plugin}\n"
        "dcgmExporter: {image: registry.local:5000/dcgm-exporter@sha256:"
        + "a" * 64
        + ", repository: '', version: ''}\n"
    )
    target = tmp_path / "gpustack.yaml"
    code, _, err = invoke("init", "--from-clusterpolicy", "--values", str(values), "-o", str(target))
    assert code == 0, err
    text = target.read_text()
    spec = yaml.safe_load(text)["spec"]
    assert "version" not in spec["devicePlugin"] and '#   devicePlugin.version: "latest"' in text
    assert spec["gfd"]["repository"] == "registry.local:5000/nvidia" and "version" not in spec["gfd"]
    assert "#   gfd.image: registry.local:5000/nvidia/k8s-device-plugin (no tag" in text
    assert (spec["dcgmExporter"]["repository"], spec["dcgmExporter"]["version"]) == (
        "registry.local:5000",
        "sha256:" + "a" * 64,
    )
    code, _, err = invoke("validate", "-f", str(target))
    assert code == 0, err


@pytest.mark.parametrize(
    ("running", "owner"),
    [
        ({"nvidia-device-plugin-daemonset"}, "none"),  # the operator deployed its operands, no mig-manager
        ({"nvidia-device-plugin-daemonset", "nvidia-mig-manager"}, "gpuplan"),
        (set(), "gpuplan"),  # nothing reconciled yet: the policy's word
    ],
)
def test_an_enabled_mig_manager_the_operator_does_not_run_is_owner_none(
    running: set[str], owner: str
) -> None:
    translation = clusterpolicy.translate(
        {"migManager": {"enabled": True}}, name="lab", namespace="gpu-operator", running=running
    )
    assert translation.document["spec"]["migManager"]["owner"] == owner
    assert any("runs no nvidia-mig-manager" in note for note in translation.notes) == (owner == "none")
