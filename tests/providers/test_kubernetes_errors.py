"""Error mapping and retries of the Kubernetes provider, through a scripted ApiClient (no network)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import (
    AccessDeniedError,
    ClusterUnreachableError,
    ConfigError,
    ConflictError,
    GpuplanError,
    ProviderError,
    TransientProviderError,
)
from gpuplan.providers.k8s_errors import IN_CLUSTER, Endpoint, RetryPolicy, map_api_exception, retry_after
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.snapshot import ObjectKey

SECRET_TOKEN = "s3cr3t-t0ken-never-printed"
SERVER = "https://cluster.example:6443"
DS_PATH = "/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-device-plugin-daemonset"
KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
APPS: tuple[Any, ...] = (
    200,
    {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [
            {"name": "daemonsets", "kind": "DaemonSet", "namespaced": True, "verbs": ["get", "list"]},
            {"name": "daemonsets/status", "kind": "DaemonSet", "namespaced": True, "verbs": ["get"]},
        ],
    },
    {},
)
DS: tuple[Any, ...] = (
    200,
    {
        "metadata": {
            "name": "nvidia-device-plugin-daemonset",
            "namespace": "gpu-operator",
            "resourceVersion": "7",
        },
        "spec": {},
    },
    {},
)


def status(code: int, reason: str, message: str, headers: dict[str, str] | None = None) -> tuple[Any, ...]:
    return (
        code,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
        headers or {},
    )


def provider_for(
    scripted: Callable[..., Any], sleeps: list[float], answers: list[Any], **kwargs: Any
) -> tuple[KubernetesProvider, Any]:
    client = scripted({"/apis/apps/v1": [APPS], DS_PATH: answers})
    return KubernetesProvider(api_client=client, sleep=sleeps, **kwargs), client


def assert_user_facing(error: GpuplanError) -> None:
    text = error.render()
    assert text.startswith("Error: ")
    assert SECRET_TOKEN not in text and "Bearer" not in text
    assert SERVER in text


def test_read_returns_the_object_with_kind_and_sends_the_token(scripted: Any, sleeps: list[float]) -> None:
    provider, client = provider_for(scripted, sleeps, [DS])
    live = provider.read(KEY)
    assert live is not None and live.key == KEY and live.resource_version == "7"
    assert live.manifest["kind"] == "DaemonSet" and live.manifest["apiVersion"] == "apps/v1"
    assert client.headers_seen[-1]["authorization"] == f"Bearer {SECRET_TOKEN}"
    assert provider.request_count == 2  # discovery of apps/v1, then the object
    assert provider.read(KEY) is not None and provider.request_count == 3  # discovery is cached


def test_404_in_read_is_none_and_an_unserved_kind_is_none(scripted: Any, sleeps: list[float]) -> None:
    provider, _ = provider_for(scripted, sleeps, [status(404, "NotFound", "daemonsets.apps not found")])
    assert provider.read(KEY) is None
    assert provider.read(ObjectKey("nvidia.com/v1", "ClusterPolicy", None, "cluster-policy")) is None
    assert sleeps == []


@pytest.mark.parametrize("code,reason", [(401, "Unauthorized"), (403, "Forbidden")])
def test_401_and_403_are_access_denied(scripted: Any, sleeps: list[float], code: int, reason: str) -> None:
    provider, _ = provider_for(
        scripted,
        sleeps,
        [status(code, reason, f'daemonsets.apps is {reason.lower()}: User "system:anonymous" cannot get')],
    )
    with pytest.raises(AccessDeniedError) as caught:
        provider.read(KEY)
    assert isinstance(caught.value.__cause__, ApiException)
    assert f"({code})" in caught.value.summary and 'User "system:anonymous"' in caught.value.detail
    assert_user_facing(caught.value)
    assert sleeps == []  # never retried


def test_a_denial_in_cluster_points_at_the_pods_service_account() -> None:
    denied = ApiException(status=403, reason="Forbidden")
    in_cluster = map_api_exception(
        denied, endpoint=Endpoint("https://10.0.0.1", IN_CLUSTER), what="list pods"
    )
    assert in_cluster.hint == "check the credentials and RBAC of the pod's service account"
    assert in_cluster.detail.startswith("server https://10.0.0.1 (in-cluster service account)")
    local = map_api_exception(
        denied, endpoint=Endpoint("https://10.0.0.1", "/home/me/.kube/config"), what="x"
    )
    assert local.hint == "check the credentials and RBAC of the user in /home/me/.kube/config"


def test_409_is_a_conflict(scripted: Any, sleeps: list[float]) -> None:
    provider, _ = provider_for(scripted, sleeps, [status(409, "Conflict", "the object has been modified")])
    with pytest.raises(ConflictError) as caught:
        provider.read(KEY)
    assert "the object has been modified" in caught.value.summary
    assert_user_facing(caught.value)


def test_other_client_errors_are_provider_errors_without_retry(scripted: Any, sleeps: list[float]) -> None:
    provider, _ = provider_for(scripted, sleeps, [status(422, "Invalid", "spec.selector: Required value")])
    with pytest.raises(ProviderError) as caught:
        provider.read(KEY)
    assert type(caught.value) is ProviderError and "422" in caught.value.summary
    assert sleeps == []


def test_429_is_retried_after_the_servers_retry_after(scripted: Any, sleeps: list[float]) -> None:
    provider, _ = provider_for(
        scripted, sleeps, [status(429, "TooManyRequests", "too many requests", {"Retry-After": "2"}), DS]
    )
    assert provider.read(KEY) is not None
    assert sleeps == [2.0]
    assert provider.request_count == 3


def test_5xx_is_retried_with_exponential_backoff_then_raised(scripted: Any, sleeps: list[float]) -> None:
    provider, _ = provider_for(
        scripted,
        sleeps,
        [status(503, "ServiceUnavailable", "etcd is down")],
        retry=RetryPolicy(attempts=4, base_delay=0.5, max_delay=1.5),
    )
    with pytest.raises(TransientProviderError) as caught:
        provider.read(KEY)
    assert sleeps == [0.5, 1.0, 1.5]
    assert provider.request_count == 1 + 4
    assert "503" in caught.value.summary and "etcd is down" in caught.value.detail
    assert_user_facing(caught.value)


def test_retry_after_is_capped_and_read_from_either_form() -> None:
    assert RetryPolicy(max_retry_after=5).delay(1, 3600) == 5
    assert retry_after({"Retry-After": "1.5"}) == 1.5
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after({}) is None and retry_after({"Retry-After": "soon"}) is None


def test_connection_refused_is_unreachable_at_once(scripted: Any, sleeps: list[float]) -> None:
    refused = urllib3.exceptions.NewConnectionError(
        None,
        "Failed to establish a new connection: "  # type: ignore[arg-type]
        "[Errno 111] Connection refused",
    )
    provider, _ = provider_for(scripted, sleeps, [refused])
    with pytest.raises(ClusterUnreachableError) as caught:
        provider.read(KEY)
    assert "Connection refused" in caught.value.detail
    assert "gpuplan sim start" in caught.value.hint
    assert caught.value.__cause__ is refused
    assert_user_facing(caught.value)
    assert sleeps == []


@pytest.mark.parametrize(
    "error",
    [
        urllib3.exceptions.NameResolutionError(
            "cluster.example",
            None,  # type: ignore[arg-type]
            socket.gaierror(-2, "Name or service not known"),
        ),
        urllib3.exceptions.ConnectTimeoutError(None, "Connection to cluster.example timed out"),
        urllib3.exceptions.MaxRetryError(
            None,
            "/apis/apps/v1",  # type: ignore[arg-type]
            urllib3.exceptions.NewConnectionError(None, "Connection refused"),
        ),  # type: ignore[arg-type]
        ConnectionRefusedError(111, "Connection refused"),
    ],
    ids=["dns", "connect-timeout", "max-retry", "os-error"],
)
def test_dns_and_connect_failures_are_unreachable_without_retry(
    scripted: Any, sleeps: list[float], error: BaseException
) -> None:
    provider, _ = provider_for(scripted, sleeps, [error])
    with pytest.raises(ClusterUnreachableError) as caught:
        provider.read(KEY)
    assert_user_facing(caught.value)
    assert sleeps == [] and provider.request_count == 2


def test_read_timeouts_are_retried(scripted: Any, sleeps: list[float]) -> None:
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/x", "Read timed out. (read timeout=60)")  # type: ignore[arg-type]
    provider, _ = provider_for(scripted, sleeps, [timeout, DS])
    assert provider.read(KEY) is not None and sleeps == [0.25]


def test_tls_failure_is_unreachable(scripted: Any, sleeps: list[float]) -> None:
    # the official client turns urllib3's SSLError into ApiException(status=0)
    provider, _ = provider_for(
        scripted,
        sleeps,
        [ApiException(status=0, reason="SSLError\ncertificate verify failed: self-signed certificate")],
    )
    with pytest.raises(ClusterUnreachableError) as caught:
        provider.read(KEY)
    assert "certificate verify failed" in caught.value.detail
    assert_user_facing(caught.value)


def test_dropped_connections_are_retried_then_unreachable(scripted: Any, sleeps: list[float]) -> None:
    reset = urllib3.exceptions.ProtocolError(
        "Connection aborted.", ConnectionResetError(104, "reset by peer")
    )
    provider, _ = provider_for(scripted, sleeps, [reset, reset, DS])
    assert provider.read(KEY) is not None and len(sleeps) == 2
    provider2, _ = provider_for(scripted, sleeps, [reset], retry=RetryPolicy(attempts=3))
    with pytest.raises(ClusterUnreachableError) as caught:
        provider2.read(KEY)
    assert "after 3 attempts" in caught.value.summary


def test_missing_kubeconfig_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider(kubeconfig=str(missing)).read(KEY)
    assert str(missing) in caught.value.render() and "--kubeconfig" in caught.value.hint


def test_default_kubeconfig_location_is_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider().read(KEY)
    assert caught.value.where.endswith("/.kube/config")


def test_invalid_kubeconfig_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [\n")
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider(kubeconfig=str(broken)).read(KEY)
    assert str(broken) in caught.value.render()
    no_context = tmp_path / "empty-kubeconfig"
    no_context.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider(kubeconfig=str(no_context), context="lab").read(KEY)
    assert "context lab" in caught.value.summary and caught.value.where == str(no_context)


def test_in_cluster_without_a_service_account_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a pod (KUBERNETES_SERVICE_HOST set) with no kubeconfig, the service account is used."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider().read(KEY)
    assert "in-cluster service account" in caught.value.summary


def test_kubeconfig_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "from-env"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(ConfigError) as caught:
        KubernetesProvider().read(KEY)
    assert caught.value.where == str(missing)
