"""ApiServer: the simulated cluster's Kubernetes REST API over HTTP(S) on 127.0.0.1, with a bearer token.

Created and started by the Simulator (:mod:`gpuplan.sim.cluster`) and by the server tests' fixture. Speaks
what kubectl 1.37 and the official Python client ask of a real apiserver (design §6.1): discovery (legacy and
aggregated), OpenAPI v3, every verb on every registered kind (:mod:`gpuplan.sim.api.handlers`), Tables,
watches as chunked newline-delimited JSON, the pods' eviction and proxy subresources, the service proxy
(:mod:`gpuplan.sim.api.service_proxy`), and ``/sim/`` control
paths handed to the Simulator. Every answer that is not a success is a metav1 Status; a bug in a handler is a
500 InternalError with a one-line message, never a traceback on the wire.

Threads: one accept loop (``serve_forever``) plus one thread per connection (HTTP/1.1 keep-alive). ``stop()``
ends watches at once, closes every open connection, joins every thread and closes every socket, so a
pytest run with ``filterwarnings=error`` sees nothing left behind. API faults (:mod:`gpuplan.sim.api.faults`)
apply to resource and pod-proxy requests only; discovery, OpenAPI, health and ``/sim/`` are never faulted. A
lost response is the one fault applied after the request is handled (the write is stored, its answer lost).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpuplan.sim.api import authz, certs, discovery, service_proxy
from gpuplan.sim.api.faults import (
    ADDRESS_NOT_ALLOWED,
    FAULT_STATUS,
    LOST_RESPONSE_ERROR,
    NO_FAULT,
    ApiFaults,
    LostResponse,
)
from gpuplan.sim.api.handlers import ResourceHandlers, WatchStream
from gpuplan.sim.api.openapi import OpenApiDocuments
from gpuplan.sim.api.pod_logs import LogStream
from gpuplan.sim.api.pod_streams import KubeletStreams, PodStreams, addresses_stream
from gpuplan.sim.api.protocol import (
    HttpError,
    Request,
    Response,
    Upgrade,
    acceptable,
    decode_body,
    json_response,
    method_not_allowed,
)
from gpuplan.sim.api.routing import Route, route
from gpuplan.sim.api.store import ApiError, Store
from gpuplan.sim.api.tokens import Tokens, UserInfo
from gpuplan.sim.api.wire import HttpServer, peer_closed

log = logging.getLogger(__name__)

ProxyFn = Callable[[dict[str, Any], int, str, str], tuple[int, str, bytes]]
ControlFn = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any]]]

_WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def write_kubeconfig(
    path: Path | str, server_url: str, token: str, ca_pem: bytes | None = None, context: str = "gpuplan-sim"
) -> Path:
    """Write a kubeconfig (mode 0600) that kubectl and the official Python client use unchanged."""
    cluster: dict[str, Any] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "current-context": context,
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}
        ],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
    os.chmod(target, 0o600)  # an existing file keeps its old mode through os.open
    return target


class ApiServer:
    """The simulated cluster's API server. Not started by ``__init__``; ``start()`` binds 127.0.0.1.

    ``faults`` may be changed at runtime (``server.faults.update(...)``). ``proxy(pod, port, path, query)``
    answers pod-proxy requests with (status, content type, body) and may raise ``ApiError``;
    ``control(method, path, body)`` answers everything under ``/sim/`` with (status, JSON body).
    """

    def __init__(
        self,
        store: Store,
        *,
        token: str,
        port: int = 0,
        tls: bool = True,
        faults: ApiFaults | None = None,
        proxy: ProxyFn | None = None,
        control: ControlFn | None = None,
        kubelet: KubeletStreams | None = None,
        tokens: Tokens | None = None,
        certificates: certs.ServingCertificates | None = None,
    ) -> None:
        if not token:
            raise ValueError("the API server needs a non-empty bearer token")
        self.store = store
        self.token = token
        self.faults = faults or ApiFaults()
        self.proxy = proxy
        self.control = control
        self.tls = tls
        self._requested_port = port
        self._stopping = threading.Event()
        self.handlers = ResourceHandlers(store, self._stopping)
        self.streams = PodStreams(store, self._stopping, kubelet, proxy)  # pods/log, exec, portforward
        self.openapi = OpenApiDocuments(store.registry, discovery.KUBERNETES_VERSION)
        self._certs = (certificates or certs.generate()) if tls else None
        # Who a bearer token is (tokens) and what they may do (RBAC), for every request.
        self.tokens = tokens or Tokens(store)
        self.tokens.admin_token = token
        self.authorizer = authz.Authorizer(store)
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def ca_pem(self) -> bytes:
        """PEM of the CA that signed the serving certificate (empty for plain HTTP)."""
        return self._certs.ca_pem if self._certs else b""

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the API server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("the API server is already started")
        self._stopping.clear()
        httpd = HttpServer(self, ("127.0.0.1", self._requested_port))
        if self._certs is not None:
            try:
                httpd.socket = self._tls_context().wrap_socket(
                    httpd.socket, server_side=True, do_handshake_on_connect=False
                )
            except BaseException:
                httpd.server_close()
                raise
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"sim-apiserver-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("simulated API server listening on %s", self.url)

    def _tls_context(self) -> ssl.SSLContext:
        assert self._certs is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only; the key lives on disk for the microseconds this takes.
        with tempfile.TemporaryDirectory(prefix="gpuplan-sim-tls-") as folder:
            cert_path, key_path = certs.write_pair(self._certs, Path(folder))
            context.load_cert_chain(cert_path, key_path)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def stop(self) -> None:
        """Stop serving: end watches, close connections, join every thread, close the listening socket."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.join_threads(timeout=10)
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=10)
        self._httpd, self._thread = None, None

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- request handling (called from connection threads) ------------------------------------------------

    def authorised(self, header: str) -> bool:
        return header.partition(" ")[0].lower() == "bearer" and self.tokens.authenticate(header) is not None

    def answer(
        self, request: Request, conn: socket.socket
    ) -> Response | WatchStream | LogStream | Upgrade | None:
        """The answer to one authorised request; None means: drop the connection without one."""
        user = self.tokens.authenticate(request.header("Authorization"))
        if user is None:  # expired since the wire checked it
            raise HttpError(401, "Unauthorized", "Unauthorized")
        user = authz.impersonate(user, request.headers, self.authorizer)
        attributes = authz.request_attributes(user, request.method, request.path, request.query)
        self.authorizer.check(attributes)
        target = route(request.path, self.store.registry)
        if target.kind == "proxy":
            self._refuse_proxy(target, attributes)
        decision = NO_FAULT
        if target.kind in ("resource", "proxy"):
            decision = self.faults.decide(write=request.method in _WRITE_METHODS)
            if decision.latency_seconds > 0:
                self.faults.sleep(decision.latency_seconds)
            if decision.drop:
                return None
            if decision.error is not None:
                injected = decision.error
                raise ApiError(
                    injected.code, injected.reason, injected.message, retry_after=injected.retry_after_seconds
                )
        if target.kind != "unknown" and not acceptable(request.header("Accept")) and target.kind != "proxy":
            raise HttpError(
                406,
                "NotAcceptable",
                "the server was unable to respond with a content type that the "
                "client supports (only application/json is served)",
            )
        answer = self._dispatch(target, request, user)
        if isinstance(answer, WatchStream | LogStream):
            answer.client_gone = lambda: peer_closed(conn)
        elif decision.lost_response is not None:
            self._lose(decision.lost_response)  # the write is stored; only its answer goes missing
            return None
        return answer

    def _refuse_proxy(self, target: Route, attributes: authz.Attributes) -> None:
        """The refusal a proxy fault asks for (:meth:`ApiFaults.proxy_refusal`), where the real apiserver
        gives it: RBAC's before anything is read, the pod registry's address check once the pod is read (a
        pod that is gone is 404 first)."""
        assert target.rt is not None and target.name is not None
        refusal = self.faults.proxy_refusal(target.rt.plural)
        if refusal == "forbidden":
            raise authz.forbidden(attributes)
        if refusal == "address-not-allowed":
            self.store.get(target.rt, target.namespace, target.name)
            raise ApiError(400, "BadRequest", ADDRESS_NOT_ALLOWED)

    def _lose(self, how: LostResponse) -> None:
        """Count the lost response; for a 504, raise it (wire sends it); for a drop, the caller returns
        None."""
        self.faults.count_fired(f"lostResponse:{how}")
        if how == "504":
            reason, message = FAULT_STATUS[LOST_RESPONSE_ERROR]
            raise ApiError(LOST_RESPONSE_ERROR, reason, message)

    def _dispatch(
        self, target: Route, request: Request, user: UserInfo
    ) -> Response | WatchStream | LogStream | Upgrade:
        if target.kind == "resource" and addresses_stream(target):
            return self.streams.handle(target, request)
        if target.kind == "resource":
            served = authz.access_endpoint(target, request, user, self.tokens, self.authorizer)
            return served or self.handlers.handle(target, request)
        if target.kind == "proxy":
            return self._proxy(target, request)
        if target.kind == "sim":
            return self._control(target, request)
        if request.method not in ("GET", "HEAD"):
            if target.kind == "unknown":
                raise HttpError(404, "NotFound", target.message)
            raise method_not_allowed()
        return self._read_only(target, request)

    def _read_only(self, target: Route, request: Request) -> Response:
        registry = self.store.registry
        body: dict[str, Any] | None = None
        content_type = "application/json"
        if target.kind == "version":
            body = discovery.version_info()
        elif target.kind == "health":
            return Response(200, b"ok", "text/plain; charset=utf-8")
        elif target.kind == "openapi":
            return self._openapi(target)
        elif target.kind in ("discovery-core", "discovery-groups"):
            if discovery.wants_aggregated(request.header("Accept")):
                body = discovery.aggregated(registry, core=target.kind == "discovery-core")
                content_type = discovery.AGGREGATED_MEDIA_TYPE
            elif target.kind == "discovery-core":
                body = discovery.api_versions(f"127.0.0.1:{self.port}")
            else:
                body = discovery.api_group_list(registry)
        elif target.kind == "discovery-group":
            body = discovery.api_group(registry, target.group)
        elif target.kind == "discovery-resources":
            body = discovery.api_resource_list(registry, target.group, target.version)
        if body is None:
            raise HttpError(
                404, "NotFound", target.message or "the server could not find the requested resource"
            )
        return json_response(200, body, pretty=request.flag("pretty"), content_type=content_type)

    def _openapi(self, target: Route) -> Response:
        if target.version == "v3":
            if not target.rest:
                return json_response(200, self.openapi.index())
            document = self.openapi.document(target.rest)
            if document is not None:
                return Response(200, document, "application/json")
        # No /openapi/v2: kubectl then uses the v3 documents for validation and patching.
        raise HttpError(404, "NotFound", "the server could not find the requested resource")

    def _proxy(self, target: Route, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            raise HttpError(
                405, "MethodNotAllowed", f"the simulated pod proxy serves GET and HEAD, not {request.method}"
            )
        assert target.rt is not None and target.name is not None
        if target.rt.plural == "services":
            return self._service_proxy(target, request)
        pod = self.store.get(target.rt, target.namespace, target.name)
        phase = pod.get("status", {}).get("phase")
        if phase != "Running":
            raise HttpError(
                503,
                "ServiceUnavailable",
                f'no endpoints available for pod "{target.name}" (phase {phase or "unknown"})',
            )
        if self.proxy is None:
            raise HttpError(503, "ServiceUnavailable", f'no endpoints available for pod "{target.name}"')
        port = target.port if target.port is not None else _first_container_port(pod)
        status, content_type, body = self.proxy(pod, port, target.rest, request.query_string)
        return Response(status, body, content_type)

    def _service_proxy(self, target: Route, request: Request) -> Response:
        assert target.rt is not None and target.name is not None and target.namespace is not None
        pod, port = service_proxy.locate(
            self.store, target.rt, target.namespace, target.name, target.port_name
        )
        if self.proxy is None:
            raise HttpError(503, "ServiceUnavailable", f'no endpoints available for service "{target.name}"')
        status, content_type, body = self.proxy(pod, port, target.rest, request.query_string)
        return Response(status, body, content_type)

    def _control(self, target: Route, request: Request) -> Response:
        if self.control is None:
            raise HttpError(404, "NotFound", "this simulator has no control endpoint")
        body = decode_body(request) if request.body.strip() else None
        if body is not None and not isinstance(body, dict):
            raise HttpError(400, "BadRequest", "a /sim/ request body must be a JSON object")
        code, answer = self.control(request.method, target.rest, body)
        return json_response(code, answer)


def _first_container_port(pod: dict[str, Any]) -> int:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("containerPort"):
                return int(port["containerPort"])
    return 80
