"""Authentication: the admin bearer token and ServiceAccount tokens (TokenRequest), as users.

A real kube-apiserver issues ServiceAccount tokens as signed JWTs (``pkg/serviceaccount/jwt.go``) and checks
them statelessly: signature, expiry, then the live ServiceAccount (and bound Pod or Secret) by uid
(``pkg/serviceaccount/claims.go``, ``validator.Validate``). The simulator issues opaque random tokens instead
and keeps what each one stands for; the checks are the same: a token stops working when it expires, when its
ServiceAccount is deleted (or replaced by one with another uid), and when the pod it is bound to is deleted.

- ``issue(namespace, service_account, pod=..., expiration_seconds=...)``: what the TokenRequest endpoint and
  the simulated kubelet (a projected ``serviceAccountToken`` volume) call.
- ``authenticate(bearer)``: the admin token is ``kubernetes-admin`` in ``system:masters``; an issued token is
  ``system:serviceaccount:NS:NAME`` in ``system:serviceaccounts``, ``system:serviceaccounts:NS`` and
  ``system:authenticated``, with the pod-name/pod-uid extra a bound token carries.
- ``token_request``: ``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`` (authentication.k8s.io/v1
  TokenRequest; ``kubectl create token``), validated as ``ValidateTokenRequest`` does (10 minutes at least).

Callers: ``sim.api.server`` (every request), ``sim.cluster`` (``Simulator.tokens``).
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuplan.sim.api import errors
from gpuplan.sim.api.store import ApiError, Store

Obj = dict[str, Any]

ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
# kube-apiserver's --api-audiences default: its --service-account-issuer, here the in-cluster URL.
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600  # pkg/apis/authentication/validation: "less than 10 minutes"
MAX_EXPIRATION_SECONDS = 1 << 32
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
CREDENTIAL_ID_EXTRA = "authentication.kubernetes.io/credential-id"
_LEEWAY = timedelta(seconds=60)  # pkg/serviceaccount/claims.go defaultLeeway


@dataclass(frozen=True)
class UserInfo:
    """Who made a request (``user.Info``): name, uid, groups, extra."""

    name: str
    groups: tuple[str, ...]
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def as_status(self) -> Obj:
        """The ``userInfo`` of a SelfSubjectReview / TokenReview status."""
        info: Obj = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra.items()}
        return info


ADMIN = UserInfo(ADMIN_USER, (MASTERS, AUTHENTICATED))


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


@dataclass(frozen=True)
class _Issued:
    namespace: str
    service_account: str
    service_account_uid: str
    expires: datetime
    pod_name: str = ""
    pod_uid: str = ""
    credential_id: str = ""


class Tokens:
    """The tokens the simulator accepts: the admin token and every issued ServiceAccount token.

    ``clock`` (UTC datetimes) decides expiry; tests pass one they move. Thread-safe: connection threads
    authenticate while the loop thread issues.
    """

    def __init__(
        self, store: Store, *, admin_token: str = "", clock: Callable[[], datetime] | None = None
    ) -> None:
        self.store = store
        self.admin_token = admin_token
        self.clock = clock or (lambda: datetime.now(UTC))
        self._issued: dict[str, _Issued] = {}
        self._lock = threading.Lock()

    def issue(
        self,
        namespace: str,
        service_account: str,
        *,
        pod: str | Obj | None = None,
        expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS,
    ) -> str:
        """A new token for ServiceAccount ``namespace/service_account``, bound to ``pod`` (its name or the
        pod object) when given; 404 ``ApiError`` when either does not exist."""
        account = self._get("ServiceAccount", namespace, service_account)
        pod_name, pod_uid = "", ""
        if pod is not None:
            pod_obj = pod if isinstance(pod, dict) else self._get("Pod", namespace, pod)
            pod_name = str(pod_obj["metadata"]["name"])
            pod_uid = str(pod_obj["metadata"].get("uid", ""))
        token = secrets.token_urlsafe(32)
        issued = _Issued(
            namespace,
            service_account,
            str(account["metadata"].get("uid", "")),
            self.clock() + timedelta(seconds=expiration_seconds),
            pod_name,
            pod_uid,
            secrets.token_hex(8),
        )
        with self._lock:
            self._issued[token] = issued
        return token

    def expiry(self, token: str) -> datetime | None:
        with self._lock:
            issued = self._issued.get(token)
        return issued.expires if issued else None

    def authenticate(self, bearer: str) -> UserInfo | None:
        """The user a bearer token (with or without its ``Bearer`` scheme) stands for, or None."""
        scheme, _, credential = bearer.strip().partition(" ")
        token = credential.strip() if scheme.lower() == "bearer" else bearer.strip()
        if not token:
            return None
        if self.admin_token and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return ADMIN
        with self._lock:
            issued = self._issued.get(token)
        if issued is None:
            return None
        if self.clock() >= issued.expires or not self._still_valid(issued):
            with self._lock:
                self._issued.pop(token, None)
            return None
        return _user(issued)

    def _still_valid(self, issued: _Issued) -> bool:
        """The live objects behind a token: the ServiceAccount with the same uid, the bound pod likewise
        (``validator.Validate`` in pkg/serviceaccount/claims.go); a pod being deleted keeps its tokens
        working until a minute past its deletionTimestamp (the validator's leeway)."""
        if not _has_uid(
            self._find("ServiceAccount", issued.namespace, issued.service_account), issued.service_account_uid
        ):
            return False
        if not issued.pod_name:
            return True
        pod = self._find("Pod", issued.namespace, issued.pod_name)
        if not _has_uid(pod, issued.pod_uid):
            return False
        deleting = str((pod or {}).get("metadata", {}).get("deletionTimestamp") or "")
        return (
            not deleting or datetime.fromisoformat(deleting.replace("Z", "+00:00")) >= self.clock() - _LEEWAY
        )

    def token_request(self, namespace: str, name: str, body: Obj | None) -> Obj:
        """The answer of ``POST .../serviceaccounts/NAME/token``: the TokenRequest with its status."""
        body = body or {}
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        seconds = DEFAULT_EXPIRATION_SECONDS if seconds is None else seconds
        _validate_expiration(name, seconds)
        bound = spec.get("boundObjectRef") or None
        pod: Obj | None = None
        if bound is not None:
            pod = self._bound_pod(namespace, name, bound)
        token = self.issue(namespace, name, pod=pod, expiration_seconds=int(seconds))
        expires = self.expiry(token) or self.clock()
        spec["expirationSeconds"] = int(seconds)
        spec.setdefault("audiences", [API_AUDIENCE])
        spec["boundObjectRef"] = bound
        meta = dict(body.get("metadata") or {})
        meta.update({"name": name, "namespace": namespace, "creationTimestamp": None})
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": meta,
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
        }

    def _bound_pod(self, namespace: str, name: str, bound: Obj) -> Obj:
        kind, ref_name = bound.get("kind"), str(bound.get("name") or "")
        if kind != "Pod" or bound.get("apiVersion", "v1") != "v1":
            raise errors.bad_request(
                f"cannot bind token for object of kind {kind!r}: the simulator binds tokens to pods only"
            )
        pod = self._get("Pod", namespace, ref_name)
        uid = bound.get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f"the UID in the bound object reference ({uid}) does not match the UID in record. "
                "The object might have been deleted and then recreated",
            )
        bound.setdefault("uid", pod["metadata"].get("uid"))
        return pod

    def _get(self, kind: str, namespace: str, name: str) -> Obj:
        rt = self.store.registry.for_kind("v1", kind)
        assert rt is not None
        return self.store.get(rt, namespace, name)

    def _find(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return self._get(kind, namespace, name)
        except ApiError as error:
            if error.code == 404:
                return None
            raise


def _has_uid(obj: Obj | None, uid: str) -> bool:
    return obj is not None and (not uid or obj["metadata"].get("uid") == uid)


def _user(issued: _Issued) -> UserInfo:
    extra: dict[str, tuple[str, ...]] = {CREDENTIAL_ID_EXTRA: (f"JTI={issued.credential_id}",)}
    if issued.pod_name:
        extra[POD_NAME_EXTRA] = (issued.pod_name,)
        extra[POD_UID_EXTRA] = (issued.pod_uid,)
    return UserInfo(
        service_account_username(issued.namespace, issued.service_account),
        (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{issued.namespace}", AUTHENTICATED),
        issued.service_account_uid,
        extra,
    )


def _validate_expiration(name: str, seconds: Any) -> None:
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise errors.bad_request("spec.expirationSeconds must be an integer")
    why = ""
    if seconds < MIN_EXPIRATION_SECONDS:
        why = "may not specify a duration less than 10 minutes"
    elif seconds > MAX_EXPIRATION_SECONDS:
        why = "may not specify a duration larger than 2^32 seconds"
    if why:
        raise ApiError(
            422,
            "Invalid",
            f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
            f"Invalid value: {seconds}: {why}",
            {
                "name": name,
                "group": "authentication.k8s.io",
                "kind": "TokenRequest",
                "causes": [
                    {
                        "reason": "FieldValueInvalid",
                        "message": f"Invalid value: {seconds}: {why}",
                        "field": "spec.expirationSeconds",
                    }
                ],
            },
        )
