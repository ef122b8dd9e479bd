"""HTTPS to a Kubernetes API server with a bearer token: JSON requests, watch streams, ``ApiError`` answers.

The simulator may not import the official client (pyproject.toml's import contracts), so this speaks the
REST protocol over urllib3, which that client is built on and brings along: one pool of keep-alive
connections shared by the threads of a node agent (its loop's writes, each kind's watch, the lease renewer).

- A failure answer's metav1 Status becomes the ``ApiError`` the in-process store raises (code, reason,
  message, details, Retry-After), so the kubelet code's conflict and not-found handling works unchanged.
- 429 and 5xx answers and connections that fail are tried again a few times (``RETRIES``, back-off from
  ``RETRY_DELAY_S`` doubling; a 429's Retry-After when it gives one), as client-go's rest client retries
  429s (``k8s.io/client-go/rest/request.go`` ``checkWait``). Every write the agent makes is safe to repeat:
  status merge patches, deletes with a uid precondition, creates of named objects (a repeat is 409).
  Then the failure is an ``ApiError`` (503 ``ServiceUnavailable`` where no answer came).
- A watch is a streamed GET whose newline-delimited JSON events are read as they arrive; ``close()`` from
  another thread shuts its socket, which ends the read at once (``stop()`` of an agent joins its threads).
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3

from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]
JSON = "application/json"
RETRIES = 4
RETRY_DELAY_S = 0.05
MAX_RETRY_DELAY_S = 2.0
TIMEOUT_S = 30.0
WATCH_READ_SLACK_S = 30.0
"""A watch's socket read gives up this long after the server should have ended it (``timeoutSeconds``): the
server sends a BOOKMARK a minute apart at least, so a silent connection is a dead one."""


def path_of(rt: ResourceType, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
    """The REST path of ``rt``'s collection, an object of it, or a subresource (``pods/x/status``)."""
    base = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    if rt.namespaced and namespace:
        base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
    base += f"/{rt.plural}"
    if name is not None:
        base += f"/{urllib.parse.quote(name, safe='')}"
    if sub:
        base += f"/{sub}"
    return base


class ApiClient:
    """Requests to one API server (``url``: ``https://host:port``), thread-safe."""

    def __init__(
        self, url: str, token: str, ca_pem: bytes | None, *, connections: int = 16, timeout: float = TIMEOUT_S
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": JSON,
            "User-Agent": "gpuplan-sim-agent",
        }
        context = None
        if self.url.startswith("https://"):
            context = ssl.create_default_context(cadata=ca_pem.decode() if ca_pem else None)
        # more threads than connections (every watch holds one) get a connection of their own, dropped after
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=connections, block=False, ssl_context=context)
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self._pool.clear()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Obj:
        """The JSON answer of one request (``{}`` for an empty one); ``ApiError`` for a failure."""
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            # a patch may come encoded already, as the in-process store takes it too
            data = (
                body
                if isinstance(body, bytes)
                else body.encode()
                if isinstance(body, str)
                else json.dumps(body, separators=(",", ":")).encode()
            )
        delay = RETRY_DELAY_S
        for attempt in range(RETRIES + 1):
            last = attempt == RETRIES or self._closed.is_set()
            try:
                response = self._pool.request(
                    method, url, body=data, headers=headers, retries=False, timeout=self.timeout
                )
            except urllib3.exceptions.HTTPError as exc:
                if last:
                    raise ApiError(503, "ServiceUnavailable", f"{method} {path}: {exc}") from exc
                delay = self._pause(delay, None)
                continue
            if response.status < 400:
                return _json(response.data)
            error = api_error(response.status, response.data, response.headers.get("Retry-After"))
            if last or not (error.code == 429 or error.code >= 500):
                raise error
            delay = self._pause(delay, error.retry_after)
        raise AssertionError("unreachable")

    def _pause(self, delay: float, retry_after: int | None) -> float:
        self._closed.wait(min(float(retry_after), MAX_RETRY_DELAY_S) if retry_after else delay)
        return min(delay * 2, MAX_RETRY_DELAY_S)

    def watch(self, path: str, query: Mapping[str, str], timeout_seconds: int) -> WatchStream:
        """Open a watch (``query`` holds ``watch=1`` and the rest); ``ApiError`` when it is refused."""
        url = self.url + path + "?" + urllib.parse.urlencode(query)
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=self._headers,
                retries=False,
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeout, read=timeout_seconds + WATCH_READ_SLACK_S),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(503, "ServiceUnavailable", f"GET {path}: {exc}") from exc
        if response.status >= 400:
            data = response.read()
            response.release_conn()
            raise api_error(response.status, data, response.headers.get("Retry-After"))
        return WatchStream(response)


class WatchStream:
    """The events of one watch answer, in order; ``close()`` may come from any thread."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._closed = False

    def events(self) -> Iterator[Obj]:
        """Each ``{"type": ..., "object": ...}`` as it arrives, until the server ends the answer. A broken
        connection raises ``ApiError`` 503 (the caller watches again from where it was)."""
        buffer = b""
        try:
            for chunk in self._response.stream(2**16):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if not self._closed:
                raise ApiError(503, "ServiceUnavailable", f"watch: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._response.shutdown()  # unblocks a read on another thread
        except (OSError, RuntimeError, ValueError):
            pass  # the answer ended: its connection went back to the pool
        self._response.release_conn()


def api_error(code: int, data: bytes, retry_after: str | None = None) -> ApiError:
    """The ``ApiError`` of a failure answer: its Status body, or the bare code where it has none."""
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict) or body.get("kind") != "Status":
        text = data.decode("utf-8", "replace").strip()
        return ApiError(code, _REASONS.get(code, "Unknown"), text or f"the server answered {code}")
    details = body.get("details") or None
    wait = retry_after or (details or {}).get("retryAfterSeconds")
    return ApiError(
        int(body.get("code") or code),
        str(body.get("reason") or _REASONS.get(code, "Unknown")),
        str(body.get("message") or ""),
        details,
        int(wait) if wait and str(wait).isdigit() else None,
    )


def status_error(status: Obj) -> ApiError:
    """The ``ApiError`` of a watch's ERROR event (its object is a Status)."""
    return api_error(int(status.get("code") or 500), json.dumps(status).encode())


def _json(data: bytes) -> Obj:
    if not data:
        return {}
    parsed = json.loads(data)
    return parsed if isinstance(parsed, dict) else {}


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
