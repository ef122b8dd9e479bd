"""`gpuplan drift report` and `gpuplan drift cronjob` at the command line (no cluster needed here): usage and
input errors, atomic --output, and the CronJob YAML checked against the Kubernetes 1.37 schemas."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from lab_stack import LAB_HEADER

from gpuplan.cli import run
from gpuplan.commands.drift import write_atomically
from gpuplan.errors import GpuplanError

SPEC = LAB_HEADER
STATUS_WRITE = {
    "apiGroups": ["gpuplan.io"],
    "resourceNames": ["lab"],
    "resources": ["gpustacks/status"],
    "verbs": ["patch"],
}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    return path


def cronjob_objects(spec_file: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert run(["drift", "cronjob", "-f", str(spec_file), *args]) == 0
    return [obj for obj in yaml.safe_load_all(capsys.readouterr().out) if obj]


def test_the_cronjob_objects_are_valid_kubernetes(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = cronjob_objects(spec_file, capsys, "--image", "registry.example.com/gpuplan:1.0")
    assert [obj["kind"] for obj in objects] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "CronJob",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def test_the_cronjob_yaml_writes_every_mapping_out_without_anchors(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["drift", "cronjob", "-f", str(spec_file)]) == 0
    text = capsys.readouterr().out
    assert "&id" not in text and "*id" not in text
    cron = [obj for obj in yaml.safe_load_all(text) if obj and obj["kind"] == "CronJob"][0]
    assert cron["spec"]["jobTemplate"]["metadata"]["labels"] == cron["metadata"]["labels"]


def test_the_cronjob_runs_the_report_once_at_a_time_with_the_spec_and_the_state(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = {
        obj["kind"]: obj
        for obj in cronjob_objects(
            spec_file, capsys, "--schedule", "0 * * * *", "--namespace", "ops", "--format", "prometheus"
        )
    }
    assert objects["ConfigMap"]["data"]["gpustack.yaml"] == SPEC
    cron = objects["CronJob"]
    assert cron["metadata"]["namespace"] == "ops" and cron["spec"]["schedule"] == "0 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == [
        "gpuplan",
        "drift",
        "report",
        "-f",
        "/etc/gpuplan/gpustack.yaml",
        "--state",
        "/var/lib/gpuplan/gpuplan.state.json",
        "--format",
        "prometheus",
    ]
    assert container["image"].startswith("gpuplan:"), "the default is the tag deploy/Dockerfile's docs build"
    assert job["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"]["secret"]["secretName"] == "gpuplan-state"
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] in ("spec", "state"))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert objects["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuplan-drift", "namespace": "ops"}
    ]
    assert pod["serviceAccountName"] == "gpuplan-drift"


def test_the_cluster_role_only_reads_what_the_report_reads(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = next(obj for obj in cronjob_objects(spec_file, capsys) if obj["kind"] == "ClusterRole")
    writes = [rule for rule in role["rules"] if set(rule["verbs"]) & WRITE_VERBS]
    assert writes == [STATUS_WRITE], "the one write: the status of the stack's own GPUStack"
    verbs = {verb for rule in role["rules"] if rule is not writes[0] for verb in rule["verbs"]}
    assert verbs <= {"get", "list", "watch"}
    readable = {
        (group, resource)
        for rule in role["rules"]
        for group in rule.get("apiGroups", ())
        for resource in rule.get("resources", ())
    }
    assert {
        ("", "nodes"),
        ("", "pods"),
        ("", "services"),
        ("apps", "daemonsets"),
        ("nvidia.com", "clusterpolicies"),
        ("", "pods/proxy"),
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("node.k8s.io", "runtimeclasses"),
    } <= readable
    proxy = next(rule for rule in role["rules"] if rule.get("resources") == ["pods/proxy"])
    assert proxy["verbs"] == ["get"]
    assert ("", "secrets") not in readable, "the report never needs to read Secrets"


def test_a_cluster_state_is_read_by_the_job_through_a_role_naming_its_secrets(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = cronjob_objects(
        spec_file,
        capsys,
        "--namespace",
        "ops",
        "--state",
        "kubernetes://gpu-operator/team",
        "--state-parts",
        "2",
    )
    assert [obj["kind"] for obj in objects] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "CronJob",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    kinds = {obj["kind"]: obj for obj in objects}
    role = kinds["Role"]
    assert role["metadata"]["namespace"] == "gpu-operator", "the Role lives beside the state"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["gpuplan-state-team", "gpuplan-state-team-part-1", "gpuplan-state-team-part-2"],
            "verbs": ["get"],
        }
    ]
    assert kinds["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuplan-drift", "namespace": "ops"}
    ]
    pod = kinds["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"][5:7] == ["--state", "kubernetes://gpu-operator/team"]
    assert [volume["name"] for volume in pod["volumes"]] == ["spec", "tmp"], "no copied state Secret"


def test_spec_state_in_the_cluster_makes_the_same_cronjob_and_a_state_file_keeps_the_copied_secret(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file.write_text(
        SPEC.rstrip("\n") + "\n  state: {backend: kubernetes, namespace: gpu-operator, name: lab}\n"
    )
    from_spec = cronjob_objects(spec_file, capsys)
    assert from_spec == cronjob_objects(spec_file, capsys, "--state", "kubernetes://gpu-operator/lab")
    assert "Role" in {obj["kind"] for obj in from_spec}
    local = cronjob_objects(spec_file, capsys, "--state", str(spec_file.parent / "gpuplan.state.json"))
    assert "Role" not in {obj["kind"] for obj in local}
    cron = next(obj for obj in local if obj["kind"] == "CronJob")
    volumes = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
    assert {
        "secretName": "gpuplan-state",
        "items": [{"key": "gpuplan.state.json", "path": "gpuplan.state.json"}],
    } in [volume.get("secret") for volume in volumes]


def test_a_state_secret_for_a_cluster_state_is_a_usage_error(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        ["drift", "cronjob", "-f", str(spec_file), "--state", "kubernetes://ns/x", "--state-secret", "s"]
    )
    assert code == 64
    assert "--state-secret is for a state file; kubernetes://ns/x is read in place" in capsys.readouterr().err


def test_an_invalid_spec_is_exit_1_and_a_bad_format_is_a_usage_error(
    tmp_path: Path, spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec: {nope: 1}\n"
    )
    assert run(["drift", "report", "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "nope" in err
    assert run(["drift", "report", "-f", str(spec_file), "--format", "yaml"]) == 64
    assert run(["drift", "cronjob", "-f", str(bad)]) == 1
    capsys.readouterr()
    assert run(["drift", "report", "-f", str(spec_file), "--allow-disruptive"]) == 64
    assert "--allow-disruptive only applies with --remediate" in capsys.readouterr().err


def test_a_corrupt_state_is_exit_1_before_the_cluster_is_asked(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (spec_file.parent / "gpuplan.state.json").write_text("{not json")
    code = run(
        ["--kubeconfig", str(spec_file.parent / "absent-kubeconfig"), "drift", "report", "-f", str(spec_file)]
    )
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("Error: ") and "state" in err.lower()


def test_an_unreachable_kubeconfig_is_exit_1(spec_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplan.state.local import LocalFileBackend
    from gpuplan.state.model import StateFile

    LocalFileBackend(spec_file.parent / "gpuplan.state.json").write(StateFile.new().next_serial())
    code = run(
        ["--kubeconfig", str(spec_file.parent / "absent-kubeconfig"), "drift", "report", "-f", str(spec_file)]
    )
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert [line for line in captured.err.splitlines() if line.startswith("Error:")] == [
        f"Error: {spec_file.parent / 'absent-kubeconfig'}: kubeconfig not found"
    ]


def test_atomic_output_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.prom"
    target.write_text("old\n")
    write_atomically(target, "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["out.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.prom"
    target.write_text("old\n")

    def refuse(source: str, destination: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(GpuplanError) as raised:
        write_atomically(target, "new\n")
    assert raised.value.where == str(target) and "No space left" in raised.value.summary
    assert "disk is full" in raised.value.hint
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["out.prom"]
