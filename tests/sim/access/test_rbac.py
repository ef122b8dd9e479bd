"""RBAC authorization of non-admin users: the real kubectl with a ServiceAccount token, the 403 bodies as the
apiserver words them, `kubectl auth can-i`, and the request attributes derived from method and path."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.api.authz import Attributes, request_attributes, rule_allows
from gpuplan.sim.api.server import write_kubeconfig
from gpuplan.sim.api.tokens import ADMIN, UserInfo
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

NS = "gpu-operator"
SA = "gpuplan-drift"
USER = f"system:serviceaccount:{NS}:{SA}"


class Account:
    def __init__(self, sim: Simulator, kubectl: Kubectl, config: Path, token: str) -> None:
        self.sim, self._kubectl, self.config, self.token = sim, kubectl, config, token

    def kubectl(self, *args: str, check: bool = False) -> Any:
        return self._kubectl(*args, kubeconfig=self.config, check=check)

    def raw(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET ``path`` with the token: (status, JSON body)."""
        assert self.sim.ca_pem is not None
        context = ssl.create_default_context(cadata=self.sim.ca_pem.decode())
        request = urllib.request.Request(
            self.sim.url + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def account(lab_sim: Simulator, kubectl: Kubectl, tmp_path: Path) -> Account:
    kubectl("create", "namespace", NS)
    kubectl("create", "serviceaccount", SA, "-n", NS)
    token = kubectl("create", "token", SA, "-n", NS).stdout.strip()
    config = write_kubeconfig(tmp_path / "sa-kubeconfig", lab_sim.url, token, ca_pem=lab_sim.ca_pem)
    return Account(lab_sim, kubectl, config, token)


def test_denials_are_403_with_the_apiserver_s_words(account: Account) -> None:
    listed = account.kubectl("get", "pods", "-n", NS)
    assert listed.returncode == 1
    assert listed.stderr.strip() == (
        f'Error from server (Forbidden): pods is forbidden: User "{USER}" cannot list resource "pods" '
        f'in API group "" in the namespace "{NS}"'
    )
    nodes = account.kubectl("get", "nodes")
    assert nodes.stderr.strip().endswith(
        f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    control = account.kubectl("get", "--raw", "/sim/v1/status")
    assert control.stderr.strip().endswith(f'forbidden: User "{USER}" cannot get path "/sim/v1/status"')


def test_a_403_body_is_a_forbidden_status_with_the_resource_s_details(account: Account) -> None:
    code, body = account.raw(f"/apis/apps/v1/namespaces/{NS}/daemonsets/x")
    assert code == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'daemonsets.apps "x" is forbidden: User "{USER}" cannot get resource "daemonsets" in API '
        f'group "apps" in the namespace "{NS}"',
        "reason": "Forbidden",
        "details": {"name": "x", "group": "apps", "kind": "daemonsets"},
        "code": 403,
    }
    assert account.raw("/api/v1/pods")[1]["details"] == {"kind": "pods"}


def test_discovery_and_version_work_for_any_authenticated_user(account: Account) -> None:
    assert account.kubectl("version", check=True).returncode == 0
    assert account.kubectl("api-resources", check=True).stdout.startswith("NAME")
    assert account.raw("/version")[0] == 200


def test_a_role_and_binding_allow_exactly_their_rules(account: Account, kubectl: Kubectl) -> None:
    kubectl("create", "role", "reader", "-n", NS, "--verb=get,list,watch", "--resource=pods")
    kubectl("create", "rolebinding", "reader", "-n", NS, "--role=reader", f"--serviceaccount={NS}:{SA}")
    kubectl("run", "p", "--image=busybox", "-n", NS)
    assert account.kubectl("get", "pods", "-n", NS, "-o", "name", check=True).stdout == "pod/p\n"
    assert account.kubectl("get", "pods", "-n", "default").returncode == 1
    logs = account.kubectl("logs", "p", "-n", NS)
    assert logs.stderr.strip().endswith(
        f'pods "p" is forbidden: User "{USER}" cannot get resource "pods/log" in API group "" '
        f'in the namespace "{NS}"'
    )
    deleted = account.kubectl("delete", "pod", "p", "-n", NS)
    assert 'cannot delete resource "pods"' in deleted.stderr


def test_resource_names_and_cluster_roles_bound_in_one_namespace(account: Account, kubectl: Kubectl) -> None:
    kubectl("create", "configmap", "mine", "-n", NS)
    kubectl("create", "configmap", "other", "-n", NS)
    kubectl("create", "clusterrole", "one-map", "--verb=get", "--resource=configmaps", "--resource-name=mine")
    kubectl(
        "create",
        "rolebinding",
        "one-map",
        "-n",
        NS,
        "--clusterrole=one-map",
        f"--group=system:serviceaccounts:{NS}",
    )
    assert account.kubectl("get", "configmap", "mine", "-n", NS, check=True).returncode == 0
    assert account.kubectl("get", "configmap", "other", "-n", NS).returncode == 1
    assert account.kubectl("get", "configmaps", "-n", NS).returncode == 1
    assert account.kubectl("get", "configmap", "mine", "-n", "default").returncode == 1


def test_kubectl_auth_can_i(account: Account, kubectl: Kubectl) -> None:
    no = account.kubectl("auth", "can-i", "list", "daemonsets.apps", "-n", NS)
    assert (no.returncode, no.stdout) == (1, "no\n")
    kubectl("create", "clusterrole", "ds-reader", "--verb=list", "--resource=daemonsets.apps")
    kubectl(
        "create", "clusterrolebinding", "ds-reader", "--clusterrole=ds-reader", f"--serviceaccount={NS}:{SA}"
    )
    yes = account.kubectl("auth", "can-i", "list", "daemonsets.apps", "-n", NS)
    assert (yes.returncode, yes.stdout) == (0, "yes\n")
    assert account.kubectl("auth", "can-i", "delete", "daemonsets.apps", "-n", NS).stdout == "no\n"
    assert account.kubectl("auth", "can-i", "get", "/version").stdout == "yes\n"
    listing = account.kubectl("auth", "can-i", "--list", "-n", NS, check=True).stdout
    assert "daemonsets.apps" in listing and "[list]" in listing
    assert kubectl("auth", "can-i", "delete", "nodes").stdout == "yes\n"  # the admin: system:masters


def _attrs(method: str, path: str, query: str = "") -> Attributes:
    parsed: dict[str, list[str]] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        parsed.setdefault(key, []).append(value)
    return request_attributes(ADMIN, method, path, parsed)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", "", ("list", "", "pods", "", "ns", "")),
        ("GET", "/api/v1/namespaces/ns/pods", "watch=true", ("watch", "", "pods", "", "ns", "")),
        ("GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dx", ("list", "", "pods", "", "", "")),
        ("GET", "/api/v1/pods", "fieldSelector=metadata.name=x", ("list", "", "pods", "", "", "x")),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/ns/daemonsets",
            "",
            ("deletecollection", "apps", "daemonsets", "", "ns", ""),
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/ns/daemonsets/d",
            "",
            ("delete", "apps", "daemonsets", "", "ns", "d"),
        ),
        ("PATCH", "/api/v1/nodes/n/status", "", ("patch", "", "nodes", "status", "", "n")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", "", ("get", "", "pods", "log", "ns", "p")),
        (
            "POST",
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
            "",
            ("create", "", "serviceaccounts", "token", "ns", "sa"),
        ),
        ("GET", "/api/v1/namespaces/ns", "", ("get", "", "namespaces", "", "ns", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", "", ("update", "", "namespaces", "finalize", "ns", "ns")),
    ],
)
def test_request_attributes_as_request_info_derives_them(
    method: str, path: str, query: str, expected: tuple[str, ...]
) -> None:
    attrs = _attrs(method, path, query)
    assert attrs.resource_request
    assert (
        attrs.verb,
        attrs.api_group,
        attrs.resource,
        attrs.subresource,
        attrs.namespace,
        attrs.name,
    ) == expected


def test_non_resource_requests_use_the_method_as_verb() -> None:
    for path in ("/version", "/apis", "/apis/apps", "/api/v1", "/openapi/v3", "/sim/v1/status"):
        attrs = _attrs("GET", path)
        assert (attrs.resource_request, attrs.verb, attrs.path) == (False, "get", path)


def test_rule_matching_wildcards_subresources_and_url_prefixes() -> None:
    user = UserInfo("u", ())
    log = Attributes(user, "get", True, api_group="", resource="pods", subresource="log", name="p")
    assert rule_allows(log, {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
    assert rule_allows(log, {"apiGroups": ["*"], "resources": ["*/log"], "verbs": ["*"]})
    assert not rule_allows(log, {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
    assert not rule_allows(
        log, {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"], "resourceNames": ["q"]}
    )
    healthz = Attributes(user, "get", False, path="/healthz/etcd")
    assert rule_allows(healthz, {"nonResourceURLs": ["/healthz/*"], "verbs": ["get"]})
    assert not rule_allows(healthz, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]})


def test_a_stored_bootstrap_binding_replaces_the_built_in_one(account: Account, kubectl: Kubectl) -> None:
    # RBAC names are path segments (ValidateRBACName): "system:discovery" is a valid name
    kubectl(
        "create", "clusterrolebinding", "system:discovery", "--clusterrole=system:discovery", "--group=nobody"
    )
    refused = account.kubectl("get", "--raw", "/apis")
    assert refused.stderr.strip().endswith(f'forbidden: User "{USER}" cannot get path "/apis"')
    assert account.kubectl("get", "--raw", "/version").returncode == 0  # still system:public-info-viewer
    bad = kubectl("create", "clusterrole", "a/b", "--verb=get", "--resource=pods", check=False)
    assert "metadata.name: Invalid value: \"a/b\": may not contain '/'" in bad.stderr


def test_kubectl_as_impersonates_a_service_account_for_the_admin_only(
    account: Account, kubectl: Kubectl
) -> None:
    assert kubectl("auth", "can-i", "list", "pods", "-n", NS, f"--as={USER}", check=False).stdout == "no\n"
    denied = kubectl("get", "pods", "-n", NS, f"--as={USER}", check=False)
    assert denied.stderr.strip().endswith(
        f'cannot list resource "pods" in API group "" in the namespace "{NS}"'
    )
    who = kubectl("auth", "whoami", f"--as={USER}", "-o", "jsonpath={.status.userInfo.groups}").stdout
    assert who == '["system:serviceaccounts","system:serviceaccounts:gpu-operator","system:authenticated"]'
    refused = account.kubectl("get", "pods", "--as=kubernetes-admin")
    assert refused.stderr.strip().endswith(
        f'users "kubernetes-admin" is forbidden: User "{USER}" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )
