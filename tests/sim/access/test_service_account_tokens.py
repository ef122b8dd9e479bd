"""ServiceAccount tokens (TokenRequest, `kubectl create token`) and what the ServiceAccount admission
plugin, the serviceaccount controller and the root-ca-cert-publisher put in place, through kubectl."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.api.tokens import ADMIN, Tokens
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory

NS = "gpu-operator"
SA = "gpuplan-drift"
UNAUTHORIZED = "error: You must be logged in to the server (Unauthorized)"


def token_kubeconfig(sim: Simulator, path: Path, token: str) -> Path:
    return write_kubeconfig(path, sim.url, token, ca_pem=sim.ca_pem)


@pytest.fixture
def account(lab_sim: Simulator, kubectl: Kubectl) -> Simulator:
    kubectl("create", "namespace", NS)
    kubectl("create", "serviceaccount", SA, "-n", NS)
    return lab_sim


def test_kubectl_create_token_authenticates_as_the_service_account(
    account: Simulator, kubectl: Kubectl, tmp_path: Path
) -> None:
    token = kubectl("create", "token", SA, "-n", NS).stdout.strip()
    config = token_kubeconfig(account, tmp_path / "sa", token)
    whoami = kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo}", kubeconfig=config).stdout
    assert '"username":"system:serviceaccount:gpu-operator:gpuplan-drift"' in whoami
    assert (
        '"groups":["system:serviceaccounts","system:serviceaccounts:gpu-operator","system:authenticated"]'
        in (whoami)
    )
    admin = kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert admin == "kubernetes-admin"


def test_a_deleted_service_account_s_token_stops_working(
    account: Simulator, kubectl: Kubectl, tmp_path: Path
) -> None:
    config = token_kubeconfig(
        account, tmp_path / "sa", kubectl("create", "token", SA, "-n", NS).stdout.strip()
    )
    assert kubectl("version", kubeconfig=config).returncode == 0
    kubectl("delete", "serviceaccount", SA, "-n", NS)
    refused = kubectl("get", "--raw", "/version", kubeconfig=config, check=False)
    assert (refused.returncode, refused.stderr.strip()) == (1, UNAUTHORIZED)
    kubectl("create", "serviceaccount", SA, "-n", NS)  # a new account of the same name has another uid
    assert kubectl("get", "--raw", "/version", kubeconfig=config, check=False).returncode == 1


def test_a_token_bound_to_a_pod_stops_working_when_the_pod_is_deleted(
    account: Simulator, kubectl: Kubectl, tmp_path: Path
) -> None:
    kubectl(
        "run",
        "holder",
        "--image=busybox",
        "-n",
        NS,
        f'--overrides={{"spec":{{"serviceAccountName":"{SA}"}}}}',
    )
    token = kubectl(
        "create", "token", SA, "-n", NS, "--bound-object-kind=Pod", "--bound-object-name=holder"
    ).stdout.strip()
    user = account.tokens.authenticate(f"Bearer {token}")
    assert user is not None and user.extra["authentication.kubernetes.io/pod-name"] == ("holder",)
    config = token_kubeconfig(account, tmp_path / "sa", token)
    assert kubectl("get", "--raw", "/version", kubeconfig=config).returncode == 0
    kubectl("delete", "pod", "holder", "-n", NS, "--grace-period=0", "--force")
    refused = kubectl("get", "--raw", "/version", kubeconfig=config, check=False)
    assert refused.stderr.strip() == UNAUTHORIZED


def test_token_durations_under_ten_minutes_are_refused(account: Simulator, kubectl: Kubectl) -> None:
    refused = kubectl("create", "token", SA, "-n", NS, "--duration=5m", check=False)
    assert refused.stderr.strip() == (
        'error: failed to create token: TokenRequest.authentication.k8s.io "gpuplan-drift" is invalid: '
        "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"
    )
    missing = kubectl("create", "token", "nobody", "-n", NS, check=False)
    assert 'serviceaccounts "nobody" not found' in missing.stderr


def test_tokens_expire_on_their_clock(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    tokens = Tokens(sim.store, admin_token="admin", clock=lambda: now[0])
    assert sim.wait_for(lambda: _has_default_account(sim))
    token = tokens.issue("default", "default", expiration_seconds=600)
    assert tokens.authenticate(token) is not None
    assert tokens.authenticate("admin") is ADMIN and tokens.authenticate("wrong") is None
    now[0] += timedelta(seconds=599)
    assert tokens.authenticate(f"Bearer {token}") is not None
    now[0] += timedelta(seconds=1)
    assert tokens.authenticate(token) is None


def _has_default_account(sim: Simulator) -> bool:
    rt = sim.store.registry.get("", "v1", "serviceaccounts")
    assert rt is not None
    return any(sa["metadata"]["name"] == "default" for sa in sim.store.list(rt, namespace="default").items)


def test_every_namespace_gets_the_default_account_and_the_root_ca(
    account: Simulator, kubectl: Kubectl
) -> None:
    for namespace in ("default", "kube-system", NS):
        assert kubectl("get", "serviceaccount", "default", "-n", namespace, "-o", "name").stdout == (
            "serviceaccount/default\n"
        )
    ca = kubectl("get", "configmap", "kube-root-ca.crt", "-n", NS, "-o", "jsonpath={.data.ca\\.crt}").stdout
    assert account.ca_pem is not None and ca == account.ca_pem.decode()


def test_pods_get_the_service_account_and_its_token_volume(account: Simulator, kubectl: Kubectl) -> None:
    kubectl("run", "plain", "--image=busybox", "-n", NS)
    spec = _pod_spec(kubectl, "plain")
    assert spec["serviceAccountName"] == "default"
    volume = spec["volumes"][-1]
    assert (
        volume["name"].startswith("kube-api-access-") and len(volume["name"]) == len("kube-api-access-") + 5
    )
    assert volume["projected"] == {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    }
    assert spec["containers"][0]["volumeMounts"] == [
        {
            "name": volume["name"],
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
    ]


def test_automount_false_on_the_pod_or_its_account_mounts_nothing(
    account: Simulator, kubectl: Kubectl
) -> None:
    kubectl(
        "run",
        "off",
        "--image=busybox",
        "-n",
        NS,
        '--overrides={"spec":{"automountServiceAccountToken":false}}',
    )
    assert "volumes" not in _pod_spec(kubectl, "off")
    kubectl("patch", "serviceaccount", SA, "-n", NS, "-p", '{"automountServiceAccountToken":false}')
    kubectl(
        "run", "quiet", "--image=busybox", "-n", NS, f'--overrides={{"spec":{{"serviceAccountName":"{SA}"}}}}'
    )
    assert "volumes" not in _pod_spec(kubectl, "quiet")


def _pod_spec(kubectl: Kubectl, name: str) -> dict[str, object]:
    spec: dict[str, object] = json.loads(kubectl("get", "pod", name, "-n", NS, "-o", "json").stdout)["spec"]
    return spec


def test_the_kubelet_s_issue_call_binds_a_token_to_a_pod(account: Simulator, kubectl: Kubectl) -> None:
    kubectl("run", "worker", "--image=busybox", "-n", NS)
    token = account.tokens.issue(NS, "default", pod="worker", expiration_seconds=3607)
    user = account.tokens.authenticate(token)
    assert user is not None and user.name == "system:serviceaccount:gpu-operator:default"
    kubectl("delete", "pod", "worker", "-n", NS, "--grace-period=0", "--force")
    assert account.tokens.authenticate(token) is None


def test_a_terminating_pod_s_token_works_for_a_minute_past_its_deletion_time(
    sim_factory: SimFactory,
) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_for(lambda: _has_default_account(sim))
    pods = sim.store.registry.get("", "v1", "pods")
    assert pods is not None
    pod = {
        "metadata": {"name": "bound", "finalizers": ["example.com/hold"]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    sim.store.create(pods, pod, namespace="default", manager="test")
    now = [datetime.now(UTC)]
    tokens = Tokens(sim.store, clock=lambda: now[0])
    token = tokens.issue("default", "default", pod="bound")
    sim.store.delete(pods, "default", "bound")  # held by its finalizer: Terminating
    deleting = sim.store.get(pods, "default", "bound")["metadata"]["deletionTimestamp"]
    deletion_time = datetime.fromisoformat(deleting.replace("Z", "+00:00"))
    now[0] = deletion_time + timedelta(seconds=58)
    assert tokens.authenticate(token) is not None
    now[0] = deletion_time + timedelta(seconds=62)
    assert tokens.authenticate(token) is None
