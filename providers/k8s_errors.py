"""Kubernetes client and transport exceptions, translated into gpuplan's errors at the provider boundary.

Called by :mod:`gpuplan.providers.kubernetes` only. The official client raises ``ApiException`` (by HTTP
status, status 0 for TLS failures) and lets urllib3's errors through; nothing above providers/ should see
either (after kopf's ``errors.py`` and httpx's ``map_httpcore_exceptions``). Every mapped error is
raised ``from`` the original, names the server and the kubeconfig, and never carries a credential: server
messages are cut to 256 characters, only the Status ``message`` is kept, and it is put on one line without
control characters (:func:`printable`: text from the cluster never drives the terminal it is shown on).

    connection refused, DNS, TLS, connect timeout   -> ClusterUnreachableError
    401, 403                                        -> AccessDeniedError
    404                                             -> None in read; an unserved API in lists
    409                                             -> ConflictError
    410 (expired continue token)                    -> the caller restarts the list
    429, 5xx, connection reset, read timeout        -> TransientProviderError(retry_after), retried
    other statuses                                  -> ProviderError

A pod- or service-proxy GET (:func:`proxy_error`) maps what no wait changes to
:class:`~gpuplan.providers.protocols.ProxyRefused` instead: 400, 401, 403, and a 404 that is not the
proxied pod being gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import (
    AccessDeniedError,
    ClusterUnreachableError,
    ConflictError,
    ProviderError,
    TransientProviderError,
)
from gpuplan.providers.protocols import ProxyRefused

SIM_HINT = (
    "is the cluster running? `gpuplan sim start --kubeconfig PATH --detach` starts the simulator; "
    "`kubectl --kubeconfig PATH get nodes` checks the connection"
)
MAX_MESSAGE = 256


IN_CLUSTER = "(in-cluster service account)"
"""What :class:`Endpoint` names instead of a kubeconfig when the client uses the pod's service account."""


@dataclass(frozen=True)
class Endpoint:
    """What error messages may say about the cluster: its URL and the kubeconfig (never credentials)."""

    server: str
    kubeconfig: str
    context: str | None = None

    def describe(self) -> str:
        if self.in_cluster:
            return f"server {self.server} {IN_CLUSTER}"
        context = f", context {self.context}" if self.context else ""
        return f"server {self.server} (kubeconfig {self.kubeconfig}{context})"

    @property
    def in_cluster(self) -> bool:
        return self.kubeconfig == IN_CLUSTER

    def credentials(self) -> str:
        """Whose access an answer of 401/403 is about, for the hint."""
        return "the pod's service account" if self.in_cluster else f"the user in {self.kubeconfig}"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of reads: exponential backoff, or the server's Retry-After when it sends one."""

    attempts: int = 5
    base_delay: float = 0.25
    max_delay: float = 8.0
    max_retry_after: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return min(self.base_delay * float(2 ** (attempt - 1)), self.max_delay)


class NetworkTransient(Exception):
    """A dropped connection or read timeout: worth a retry; unreachable if it persists."""


def status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body, or the body cut short; never more than 256 chars, on
    one line, without control characters (:func:`printable`)."""
    decoded = status_of(body)
    if decoded is not None and decoded.get("message"):
        return printable(str(decoded["message"]))
    return printable(body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or ""))


def status_of(body: Any) -> dict[str, Any] | None:
    """A Kubernetes Status body as a dict, None when the body is not one (a proxied backend's own text)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) and decoded.get("kind") == "Status" else None


def printable(text: str) -> str:
    """``text`` as one line of printable characters, cut to 256: an escape sequence or a carriage return
    in what a server (or the pod behind its proxy) says must not move the cursor, recolour or overwrite
    the terminal gpuplan prints it on."""
    shown = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return shown if len(shown) <= MAX_MESSAGE else shown[: MAX_MESSAGE - 3] + "..."


def retry_after(headers: Any) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    value = None
    if headers is not None:
        value = headers.get("Retry-After") or headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        from datetime import datetime

        return max((parsedate_to_datetime(str(value)) - datetime.now(UTC)).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return None


def map_api_exception(exc: ApiException, *, endpoint: Endpoint, what: str) -> ProviderError:
    """The gpuplan error for a non-2xx answer (404 and 410 are handled by the caller before this)."""
    status = int(exc.status or 0)
    message = status_message(exc.body) or str(exc.reason or "")
    if status == 0:
        return ClusterUnreachableError(
            f"cannot connect to the cluster at {endpoint.server}",
            detail=f"{endpoint.describe()}: {message}",
            hint=SIM_HINT,
        )
    if status in (401, 403):
        verb = "is not authenticated" if status == 401 else "is not allowed"
        return AccessDeniedError(
            f"{what}: the cluster says the user {verb} ({status})",
            detail=f"{endpoint.describe()}: {message}",
            hint=f"check the credentials and RBAC of {endpoint.credentials()}",
        )
    if status == 409:
        return ConflictError(
            f"{what}: conflict ({message})",
            detail=endpoint.describe(),
            hint="the object changed meanwhile; run the command again",
        )
    if status == 429 or status >= 500:
        return TransientProviderError(
            f"{what}: the cluster answered {status} {exc.reason or ''}".rstrip(),
            retry_after=retry_after(exc.headers),
            detail=f"{endpoint.describe()}: {message}",
            hint="the API server is overloaded or failing; try again later",
        )
    return ProviderError(
        f"{what}: the cluster answered {status} {exc.reason or ''}".rstrip(),
        detail=f"{endpoint.describe()}: {message}",
    )


def proxy_error(exc: ApiException, *, endpoint: Endpoint, what: str, resource: str) -> ProviderError:
    """The error of a pod- or service-proxy GET's non-2xx answer (``resource``: ``pods`` or ``services``),
    split as the real kube-apiserver answers (Kubernetes v1.37.2):

    - 400: the registry's ``ResourceLocation`` refused the target, e.g. ``address not allowed`` for a pod
      IP that is not global unicast (pkg/registry/core/pod/strategy.go); the pod keeps its IP: permanent.
    - 401, 403: authentication or RBAC (``get`` on ``pods/proxy``, ``services/proxy``): permanent.
    - 404 as a Status naming the proxied kind: the pod is gone (the DaemonSet replaces it; the next read
      finds the new one): not yet; the Service is gone: permanent. Any other 404 is the backend's own
      answer for the path, passed through by the proxy: permanent.
    - 503: ``error trying to reach service`` (the dial failed: the pod not listening yet; apimachinery
      pkg/util/proxy/transport.go) or ``no endpoints available`` (no Ready endpoint yet; pkg/registry/
      core/service/storage/storage.go); 502, 500, 429: transient, as every read (:func:`map_api_exception`).
    """
    status = int(exc.status or 0)
    reason = status_message(exc.body) or printable(str(exc.reason or ""))
    if status == 404:
        details = (status_of(exc.body) or {}).get("details") or {}
        if details.get("kind") == "pods":
            return ProviderError(f"{what}: the pod is gone ({reason})", detail=endpoint.describe())
        if details.get("kind") != "services":
            reason = f"the proxied server answered 404 for the path: {reason}"
    if status in (400, 401, 403, 404):
        return ProxyRefused(
            f"{what}: the API server answered {status}: {reason}",
            status=status,
            reason=reason,
            detail=endpoint.describe(),
        )
    return map_api_exception(exc, endpoint=endpoint, what=what)


def classify_transport_error(exc: BaseException) -> BaseException:
    """urllib3's errors: the root cause of a MaxRetryError, and whether it is worth a retry."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError)):
        return NetworkTransient(str(exc))
    return exc


def unreachable(exc: BaseException, *, endpoint: Endpoint, attempts: int = 1) -> ClusterUnreachableError:
    """The error for a cluster that cannot be reached (refused, DNS, TLS, timeouts, dropped connections)."""
    reason = " ".join(str(exc).split())[:MAX_MESSAGE]
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    return ClusterUnreachableError(
        f"cannot reach the cluster at {endpoint.server}{tried}",
        detail=f"{endpoint.describe()}: {type(exc).__name__}: {reason}",
        hint=SIM_HINT,
    )
