"""Pods of gpuplan's own image run their command for real, in a sandbox: the ConfigMap mounted, the
service account's token and the in-cluster API reachable, the environment resolved, the exit code in the
status, and the process killed when the pod goes (or the simulator stops)."""

from __future__ import annotations

import base64
import os
import textwrap
from typing import Any

from gpuplan.commands.demo import SPEC
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory, needs_sandbox

pytestmark = needs_sandbox()
IMAGE = "gpuplan:test"


class Pods:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.reg = sim.store.registry

    def create(self, kind: str, body: dict[str, Any]) -> None:
        rt = self.reg.for_kind("v1", kind)
        self.sim.store.create(
            rt, {"apiVersion": "v1", "kind": kind, **body}, namespace="default", manager="test"
        )

    def pod(self, name: str) -> dict[str, Any]:
        return self.sim.store.get(self.reg.for_kind("v1", "Pod"), "default", name)

    def phase(self, name: str) -> str:
        return str(self.pod(name)["status"].get("phase"))

    def finished(self, name: str) -> bool:
        return self.phase(name) in ("Succeeded", "Failed")

    def log(self, name: str, container: str = "main") -> list[str]:
        uid = self.pod(name)["metadata"]["uid"]
        return [line.text for line in self.sim.runtime.logs.read(uid, container)]

    def main(self, name: str) -> dict[str, Any]:
        statuses = self.pod(name)["status"].get("containerStatuses") or [{}]
        status: dict[str, Any] = statuses[0]
        return status

    def terminated(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = self.pod(name)["status"]["containerStatuses"][0]["state"]["terminated"]
        return state


def bare_pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "command": command, **spec.pop("container", {})}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def test_gpuplan_validate_reads_the_spec_from_a_mounted_configmap(sim_factory: SimFactory) -> None:
    pods = Pods(sim_factory("lab"))
    pods.create("ConfigMap", {"metadata": {"name": "gpustack"}, "data": {"gpustack.yaml": SPEC}})
    pods.create(
        "Pod",
        bare_pod(
            "validate",
            ["gpuplan", "validate", "-f", "/config/gpustack.yaml"],
            container={"volumeMounts": [{"name": "spec", "mountPath": "/config"}]},
            volumes=[{"name": "spec", "configMap": {"name": "gpustack"}}],
        ),
    )
    assert pods.sim.wait_for(lambda: pods.finished("validate"), timeout=60)
    assert pods.phase("validate") == "Succeeded", pods.log("validate")
    assert pods.terminated("validate")["exitCode"] == 0
    assert "The configuration is valid." in pods.log("validate")


def test_gpuplan_inventory_reads_the_api_in_cluster_with_its_service_account(sim_factory: SimFactory) -> None:
    pods = Pods(sim_factory("lab"))
    pods.create("Pod", bare_pod("denied", ["python", "-m", "gpuplan", "inventory"]))
    assert pods.sim.wait_for(lambda: pods.finished("denied"), timeout=60)
    assert pods.phase("denied") == "Failed", "the default service account may not list nodes"
    assert any("cannot list resource" in line for line in pods.log("denied")), pods.log("denied")
    grant_reading(pods.sim)
    pods.create("Pod", bare_pod("inventory", ["python", "-m", "gpuplan", "inventory"]))
    assert pods.sim.wait_for(lambda: pods.finished("inventory"), timeout=60)
    log = pods.log("inventory")
    assert pods.phase("inventory") == "Succeeded", log
    assert any("lab-node" in line for line in log), log


def grant_reading(sim: Simulator) -> None:
    """What an operator would bind to the pod's account: read everything, cluster-wide (no Secrets are
    in the way here)."""
    rbac = "rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": rbac,
        "kind": "ClusterRole",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": rbac,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
    }
    for obj in (role, binding):
        sim.store.create(sim.store.registry.for_kind(rbac, obj["kind"]), obj, manager="test")


def test_the_environment_token_and_exit_code_are_the_containers(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab")
    pods = Pods(sim)
    pods.create("ConfigMap", {"metadata": {"name": "settings"}, "data": {"colour": "green"}})
    pods.create(
        "Secret", {"metadata": {"name": "creds"}, "data": {"password": base64.b64encode(b"s3cret").decode()}}
    )
    script = textwrap.dedent(
        """
        import os
        names = ("PLAIN", "FROM_MAP", "FROM_SECRET", "MY_NAMESPACE", "MY_NAME", "KUBERNETES_SERVICE_HOST")
        for name in names:
            print(name, os.environ[name])
        print("PORT", os.environ["KUBERNETES_SERVICE_PORT"])
        print("CWD", os.getcwd())
        account = "/var/run/secrets/kubernetes.io/serviceaccount"
        print("TOKEN", open(account + "/token").read())
        print("NS", open(account + "/namespace").read())
        print("CA", open(account + "/ca.crt").read().startswith("-----BEGIN CERTIFICATE-----"))
        open("/scratch/note", "w").write("kept")
        print("SCRATCH", open("/scratch/note").read())
        raise SystemExit(3)
        """
    )
    env = [
        {"name": "PLAIN", "value": "hello"},
        {"name": "FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "colour"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "MY_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    pods.create(
        "Pod",
        bare_pod(
            "envy",
            ["python", "-c", script],
            container={
                "env": env,
                "workingDir": "/work/here",
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            },
            volumes=[{"name": "scratch", "emptyDir": {}}],
        ),
    )
    assert sim.wait_for(lambda: pods.finished("envy"), timeout=60)
    log = pods.log("envy")
    assert pods.phase("envy") == "Failed", log
    assert (pods.terminated("envy")["exitCode"], pods.terminated("envy")["reason"]) == (3, "Error")
    port = sim.url.rsplit(":", 1)[1]
    for expected in (
        "PLAIN hello",
        "FROM_MAP green",
        "FROM_SECRET s3cret",
        "MY_NAMESPACE default",
        "MY_NAME envy",
        "KUBERNETES_SERVICE_HOST 127.0.0.1",
        f"PORT {port}",
        "CWD /work/here",
        "NS default",
        "CA True",
        "SCRATCH kept",
    ):
        assert expected in log, (expected, log)
    assert not os.path.exists("/scratch") and not os.path.exists("/work/here")
    # the kubelet's projected token: the pod's service account, bound to the pod, not the admin's
    [token] = [line.split(" ", 1)[1] for line in log if line.startswith("TOKEN ")]
    user = sim.tokens.authenticate(token)
    assert token != sim.token and user is not None
    assert user.name == "system:serviceaccount:default:default"


def test_a_missing_configmap_key_keeps_the_container_from_starting(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab")
    pods = Pods(sim)
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]
    pods.create("Pod", bare_pod("unconfigured", ["gpuplan", "--help"], container={"env": env}))
    assert sim.wait_idle(10)
    waiting = pods.pod("unconfigured")["status"]["containerStatuses"][0]["state"]["waiting"]
    assert (waiting["reason"], waiting["message"]) == (
        "CreateContainerConfigError",
        'configmap "absent" not found',
    )
    assert sim.runtime.processes.running() == []


STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_deleting_the_pod_kills_its_process_after_the_grace_period(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab")
    pods = Pods(sim)
    pods.create("Pod", bare_pod("stubborn", ["python", "-c", STUBBORN], terminationGracePeriodSeconds=1))
    assert sim.wait_for(lambda: pods.log("stubborn") == ["ready"], timeout=60)
    assert pods.phase("stubborn") == "Running"
    uid = pods.pod("stubborn")["metadata"]["uid"]
    pid = sim.runtime.processes.pid(uid)
    assert pid is not None and _alive(pid)
    sim.store.delete(sim.store.registry.for_kind("v1", "Pod"), "default", "stubborn")
    assert sim.wait_for(lambda: not _alive(pid), timeout=20)


def test_stopping_the_simulator_ends_every_process(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab")
    pods = Pods(sim)
    pods.create(
        "Pod", bare_pod("sleeper", ["python", "-c", "import time; print('up', flush=True); time.sleep(120)"])
    )
    assert sim.wait_for(lambda: pods.log("sleeper") == ["up"], timeout=60)
    pid = sim.runtime.processes.pid(pods.pod("sleeper")["metadata"]["uid"])
    assert pid is not None
    sim.stop()
    assert not _alive(pid)


def test_on_failure_runs_the_command_again_after_a_failure(sim_factory: SimFactory) -> None:
    sim = sim_factory({**_lab_with_fast_backoff()})
    pods = Pods(sim)
    pods.create(
        "Pod",
        bare_pod("flaky", ["python", "-c", "print('try'); raise SystemExit(2)"], restartPolicy="OnFailure"),
    )
    assert sim.wait_for(lambda: pods.main("flaky").get("restartCount", 0) >= 1, timeout=60)
    status = pods.main("flaky")
    assert status["lastState"]["terminated"]["exitCode"] == 2
    uid = pods.pod("flaky")["metadata"]["uid"]
    assert sim.wait_for(
        lambda: [line.text for line in sim.runtime.logs.read(uid, "main", previous=True)] == ["try"]
    )


def _lab_with_fast_backoff() -> dict[str, Any]:
    from gpuplan.sim.scenario import load_scenario

    scenario = load_scenario("lab").model_dump(exclude_none=True)
    scenario["timing"] = {"podReadySeconds": 0.01, "crashLoopBackoffSeconds": 0.05}
    return scenario
