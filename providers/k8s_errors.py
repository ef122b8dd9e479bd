"""Kubernetes client and transport exceptions, translated into gpuplan's errors at the provider boundary.

Called by :mod:`gpuplan.providers.kubernetes` only. The official client raises ``ApiException`` (by HTTP
status, status 0 for TLS failures) and lets urllib3's errors through; nothing above providers/ should see
either (after kopf's ``errors.py`` and httpx's ``map_httpcore_exceptions``). Every mapped error is
raised ``from`` the original, names the server and the kubeconfig, and never carries a credential: server
messages are cut to 256 characters and only the Status ``message`` is kept.

    connection refused, DNS, TLS, connect timeout   -> ClusterUnreachableError
    401, 403                                        -> AccessDeniedError
    404                                             -> None in read; an unserved API in lists
    409                                             -> ConflictError
    410 (expired continue token)                    -> the caller restarts the list
    429, 5xx, connection reset, read timeout        -> TransientProviderError(retry_after), retried
    other statuses                                  -> ProviderError
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
    """The ``message`` of a Kubernetes Status body, or the body cut short; never more than 256 chars."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("message"):
        text = str(decoded["message"])
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


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
