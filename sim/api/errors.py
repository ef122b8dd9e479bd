"""API failures as the kube-apiserver reports them: ``ApiError`` and the constructors of its common reasons.

``ApiError.status()`` is the metav1 Status body a client receives. The constructors word their messages
exactly as the real server does (``daemonsets.apps "x" not found``, ``Operation cannot be fulfilled on ...``),
because clients and tests match on them.

Callers: every part of ``sim.api`` that refuses a request (the store and its write pipeline, admission,
the HTTP handlers). ``ApiError`` is re-exported by ``sim.api.store``, the name other code imports.
"""

from __future__ import annotations

from typing import Any

from gpuplan.sim.api import managed, validation
from gpuplan.sim.api.registry import ResourceType

MODIFIED_WHY = "the object has been modified; please apply your changes to the latest version and try again"


class ApiError(Exception):
    """An API failure as the apiserver reports it; ``status()`` is the metav1 Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            **({"reason": self.reason} if self.reason else {}),  # omitempty: a Status failure a handler made
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def details(rt: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    """The Status details naming one object: name, group (when not core) and the resource plural."""
    found: dict[str, Any] = {"name": name}
    if rt.group:
        found["group"] = rt.group
    found["kind"] = rt.plural
    return {**found, **extra}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', details(rt, name))


def not_served(rt: ResourceType, name: str | None = None) -> ApiError:
    """A resource (or subresource) the server does not serve: the generic 404 without an object name."""
    found = details(rt, name) if name is not None else {"group": rt.group, "kind": rt.plural}
    return ApiError(404, "NotFound", "the server could not find the requested resource", found)


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
        details(rt, name),
    )


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    """403 as admission refuses a request: ``pods "x" is forbidden: <why>``."""
    return ApiError(403, "Forbidden", f'{rt.group_resource} "{name}" is forbidden: {why}', details(rt, name))


def invalid(rt: ResourceType, name: str, causes: list[dict[str, str]]) -> ApiError:
    kind_details = {
        "name": name,
        **({"group": rt.group} if rt.group else {}),
        "kind": rt.kind,
        "causes": causes,
    }
    return ApiError(422, "Invalid", validation.invalid_message(rt, name, causes), kind_details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def apply_conflict(rt: ResourceType, name: str, found: list[tuple[dict[str, Any], managed.Path]]) -> ApiError:
    """409 of a server-side apply that would change fields other managers own (without force): details
    hold only the causes, as apimachinery's NewApplyConflict leaves the object out."""
    message, causes = managed.conflict_report(found)
    return ApiError(409, "Conflict", message, {"causes": causes})
