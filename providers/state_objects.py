"""GET, create, replace and delete of single namespaced objects as plain JSON: what the cluster state backend
(:mod:`gpuplan.providers.state_secret`) needs of the API server, through the reader's one request path.

Each call is one request (no retries: a write that may have landed is for the caller to judge, and the
backend re-reads before every write anyway). 404 is ``None`` on a GET and :class:`Gone` elsewhere, 409 is
:class:`Conflict` (a failed resourceVersion precondition, or a create that lost to another), everything else
is mapped by :mod:`gpuplan.providers.k8s_errors`; nothing of a request body (state data) reaches a message.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpuplan.errors import AccessDeniedError
from gpuplan.providers.k8s_errors import classify_transport_error, map_api_exception, unreachable
from gpuplan.providers.kubernetes import KubernetesProvider, Request

Object = dict[str, Any]


class Conflict(Exception):
    """409: the object changed since it was read (or a create found it already there)."""


class Gone(Exception):
    """404 on a write: the object was deleted meanwhile (or, on a create, its namespace does not exist)."""


class ObjectClient:
    """JSON in, JSON out, on ``/api/v1`` and ``/apis/<group>/<version>`` paths."""

    def __init__(self, provider: KubernetesProvider) -> None:
        self.provider = provider

    def get(self, path: str, *, what: str) -> Object | None:
        try:
            return self._call(Request("GET", path), what=what)
        except Gone:
            return None

    def create(self, collection: str, body: Object, *, what: str) -> Object:
        return self._call(Request("POST", collection, body=body, content_type="application/json"), what=what)

    def replace(self, path: str, body: Object, *, what: str) -> Object:
        """PUT; the body's ``metadata.resourceVersion`` is the precondition (409 when it is not current)."""
        return self._call(Request("PUT", path, body=body, content_type="application/json"), what=what)

    def delete(self, path: str, *, what: str) -> None:
        try:
            self._call(Request("DELETE", path), what=what)
        except Gone:
            pass

    def _call(self, request: Request, *, what: str) -> Object:
        endpoint = self.provider.endpoint
        try:
            data = self.provider._request(request)
        except ApiException as exc:
            if exc.status == 404:
                raise Gone() from exc
            if exc.status == 409:
                raise Conflict() from exc
            error = map_api_exception(exc, endpoint=endpoint, what=what)
            if isinstance(error, AccessDeniedError) and exc.status == 403:
                error.hint += "; `gpuplan state rbac` prints the Role a user of the state needs"
            raise error from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise unreachable(classify_transport_error(exc), endpoint=endpoint) from exc
        decoded: Object = json.loads(data) if data else {}
        return decoded

    def close(self) -> None:
        self.provider.close()
