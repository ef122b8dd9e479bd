"""The HTTP vocabulary shared by the server's parts: requests, responses, Status bodies, media types.

Used by :mod:`gpuplan.sim.api.handlers` (which turns a request into a response) and
:mod:`gpuplan.sim.api.server` (which reads requests from and writes responses to sockets). Plain data and
pure functions; no sockets here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from gpuplan.sim.api import protobuf

JSON = "application/json"
_PROTOBUF = "application/vnd.kubernetes.protobuf"
_YAML_TYPES = ("application/yaml", "application/apply-patch+yaml")
_JSON_BODY_TYPES = (
    JSON,
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "",
)


class HttpError(Exception):
    """An error answered with a metav1 Status (raised by handlers for what the store does not check)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.retry_after = details, retry_after

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` of kind Failure, as every apiserver error body is."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = dict(details)
    return body


METHOD_NOT_ALLOWED = "the server does not allow this method on the requested resource"


def method_not_allowed() -> HttpError:
    """A method no route of the path serves: go-restful's 405, which the apiserver answers as
    ``apierrors.NewGenericServerResponse(405, "", GroupResource{}, ...)`` (apiserver pkg/server/handler.go
    serviceErrorHandler): the generic message, nothing about the method or resource, empty details."""
    return HttpError(405, "MethodNotAllowed", METHOD_NOT_ALLOWED, details={})


def success_status(code: int, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": code,
    }
    if details:
        body["details"] = dict(details)
    return body


@dataclass
class Request:
    """One parsed HTTP request. ``query`` maps each parameter to its values (``?a=1&a=2``); ``headers`` has
    lower-case names (HTTP header names are case-insensitive)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: bytes = b""
    query_string: str = ""  # as sent, for the pod proxy to pass on verbatim

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() in ("1", "true", "yes")

    def header(self, name: str) -> str:
        return self.headers.get(name.lower()) or ""

    @property
    def content_type(self) -> str:
        return self.header("Content-Type").split(";")[0].strip().lower()


@dataclass
class Response:
    """A complete answer: status code, body bytes, content type and extra headers."""

    code: int
    body: bytes
    content_type: str = JSON
    headers: list[tuple[str, str]] = field(default_factory=list)


class Stream(Protocol):
    """A chunked answer (watch): iterate for chunks; ``close`` releases what it holds."""

    code: int
    content_type: str

    def chunks(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Connection(Protocol):
    """The raw connection an :class:`Upgrade` takes over: ``read`` returns at most ``size`` bytes (b"" at
    EOF, also once the server stops), ``write`` sends all of ``data``."""

    def read(self, size: int) -> bytes: ...

    def write(self, data: bytes) -> None: ...


@dataclass
class Upgrade:
    """A ``101 Switching Protocols`` answer: the headers, then ``serve`` owns the connection until it returns
    (WebSocket exec, SPDY port-forward); the connection is closed after."""

    headers: list[tuple[str, str]]
    serve: Callable[[Connection], None]


def encode(obj: Any, *, pretty: bool = False) -> bytes:
    """JSON bytes of ``obj``: compact, serialised once per response (indented only for ``?pretty=true``)."""
    if pretty:
        return json.dumps(obj, indent=2).encode()
    return json.dumps(obj, separators=(",", ":")).encode()


def json_response(
    code: int,
    obj: Any,
    *,
    pretty: bool = False,
    headers: list[tuple[str, str]] | None = None,
    content_type: str = JSON,
) -> Response:
    return Response(code, encode(obj, pretty=pretty), content_type, list(headers or []))


def error_response(error: HttpError | Any) -> Response:
    """The Status answer of an :class:`HttpError` or a store ``ApiError`` (anything with ``status()``)."""
    body = error.status()
    headers = []
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    return json_response(int(body.get("code", 500)), body, headers=headers)


def decode_body(request: Request) -> Any:
    """The request body as JSON data; YAML for the YAML media types, built-in kinds in protobuf
    (:mod:`gpuplan.sim.api.protobuf`). 415 for CBOR and protobuf of kinds without a table, 400 if
    malformed."""
    media = request.content_type
    if media.startswith(_PROTOBUF):
        try:
            return protobuf.decode(request.body)
        except protobuf.UnknownKind:
            pass  # a kind without a table: refused as a media type this server does not read
        except (protobuf.ProtobufError, IndexError, UnicodeDecodeError) as exc:
            raise HttpError(
                400, "BadRequest", f"the object provided is unrecognized: {exc} ({request.body[:32].hex()})"
            ) from exc
    if media.startswith(_PROTOBUF) or media.endswith("+cbor") or media == "application/cbor":
        raise HttpError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f'application/json, application/yaml (got "{media}")',
        )
    if not request.body.strip():
        raise HttpError(400, "BadRequest", "the body of the request was empty")
    try:
        if media in _YAML_TYPES:
            return yaml.safe_load(request.body.decode())
        if media in _JSON_BODY_TYPES or media.endswith("+json"):
            return json.loads(request.body)
    except (ValueError, yaml.YAMLError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HttpError(
            400, "BadRequest", f"the body of the request could not be decoded: {first_line}"
        ) from exc
    raise HttpError(415, "UnsupportedMediaType", f'unsupported media type "{media}"')


def acceptable(accept: str | None) -> bool:
    """False when the Accept header names only media types this server cannot produce (protobuf, CBOR)."""
    if not accept or not accept.strip():
        return True
    for media in accept.split(","):
        base = media.split(";")[0].strip().lower()
        if base in (JSON, "*/*", "application/*", "") or base.endswith("+json"):
            return True
    return False
