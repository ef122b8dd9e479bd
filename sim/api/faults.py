"""API faults: error rates, 429 with Retry-After, latency, dropped connections and lost responses, switchable
at runtime.

The scenario's ``faults.api`` block (design §6) becomes an :class:`ApiFaults` through
:meth:`ApiFaults.from_spec`;
the Simulator's control endpoint changes it at runtime with :meth:`ApiFaults.update`. The server
(:mod:`gpuplan.sim.api.server`) asks :meth:`ApiFaults.decide` once per client request to a resource path and
acts on the answer. Discovery, OpenAPI, health and ``/sim/`` paths are never faulted, on purpose: kubectl and
the Python client must be able to start and learn the API even on a flaky simulated server, and tests must be
able to switch faults off again; a real flaky apiserver would fail those too, but nothing gpuplan does
depends on retrying discovery. Controllers and kubelets use the store directly, so faults never reach them.

Errors and drops strike *before* the request is handled: nothing changes in the store. A **lost response**
(``lostResponseRate``, writes only) strikes *after*: the server handles the write, stores its effect, then
drops the connection or answers 504 Timeout instead of the real answer, half and half. That is the case a
client's retry must survive without doing the write twice (a create retried blindly makes a duplicate or
fails with AlreadyExists). :meth:`ApiFaults.fired` counts every fault that struck, so a test can prove its
faults happened.

A **refused proxy** (set at runtime only, no scenario asks for it: ``update(proxy_refused={"pods":
"address-not-allowed"})``; pods may be refused with ``address-not-allowed`` or ``forbidden``, services with
``forbidden``) answers every pod- or service-proxy request with the refusal a real apiserver gives for good:
400 ``address not allowed`` where the pod's IP is not a global unicast address (loopback, link-local: the
pod registry's ``ResourceLocation``, pkg/registry/core/pod/strategy.go of Kubernetes v1.37.2), or RBAC's 403
for a user without the ``get`` verb on ``pods/proxy`` or ``services/proxy``. It is not drawn: it holds until
cleared, as the real causes do; the server asks :meth:`ApiFaults.proxy_refusal` once per proxy request.

Deterministic with a seed: the same seed and the same sequence of requests give the same faults.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

# The codes a scenario may ask for, with the reason and message a real apiserver (or the proxy in front of it)
# sends with them.
FAULT_STATUS: dict[int, tuple[str, str]] = {
    409: (
        "Conflict",
        "Operation cannot be fulfilled: the object has been modified; please apply your changes "
        "to the latest version and try again (simulated fault)",
    ),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later (simulated fault)",
    ),
    500: (
        "InternalError",
        'an error on the server ("simulated fault") has prevented the request from succeeding',
    ),
    502: ("InternalError", "bad gateway (simulated fault)"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request (simulated fault)"),
    504: ("Timeout", "the server was unable to return a response in the time allotted (simulated fault)"),
}
_WRITE_ONLY_CODES = frozenset({409})
_SPEC_KEYS = {
    "errorRate": "error_rate",
    "codes": "codes",
    "latencyMs": "latency_ms",
    "dropRate": "drop_rate",
    "retryAfterSeconds": "retry_after_seconds",
    "lostResponseRate": "lost_response_rate",
    "seed": "seed",
}
PROXY_REFUSALS: dict[str, frozenset[str]] = {
    "pods": frozenset({"address-not-allowed", "forbidden"}),
    "services": frozenset({"forbidden"}),
}
"""The refusals each proxied resource may be given: only the pod registry checks the address it proxies to
(the service registry's ``ResourceLocation`` proxies to an EndpointSlice address, which validation already
keeps out of loopback and link-local ranges)."""
ADDRESS_NOT_ALLOWED = "address not allowed"
"""The pod registry's message for a pod IP that is not global unicast (``errors.NewBadRequest``)."""
LOST_RESPONSE_ERROR: Final = 504
"""The code a lost response answers when it is not a dropped connection (a gateway or the apiserver's own
request timeout, after the write went through)."""


@dataclass(frozen=True)
class InjectedError:
    """An error the server must answer instead of serving the request."""

    code: int
    reason: str
    message: str
    retry_after_seconds: int | None


LostResponse = Literal["drop", "504"]


@dataclass(frozen=True)
class FaultDecision:
    """What to do with one request: wait ``latency_seconds``, then drop it, fail it, or serve it; when
    ``lost_response`` is set, serve it and then drop the connection (``"drop"``) or answer 504 (``"504"``)."""

    latency_seconds: float
    drop: bool
    error: InjectedError | None
    lost_response: LostResponse | None = None


NO_FAULT = FaultDecision(latency_seconds=0.0, drop=False, error=None)


class ApiFaults:
    """Fault settings shared by all request threads; thread-safe, mutable at runtime through :meth:`update`.

    ``sleep`` is the function the server calls to apply latency (tests inject a recorder instead of
    ``time.sleep``, so latency is checked by counting, not by the clock).
    """

    def __init__(
        self,
        error_rate: float = 0.0,
        codes: Iterable[int] = (500,),
        latency_ms: float = 0,
        drop_rate: float = 0.0,
        retry_after_seconds: int = 1,
        lost_response_rate: float = 0.0,
        proxy_refused: Mapping[str, str] | None = None,
        seed: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._lock = threading.Lock()
        self.sleep = sleep
        self.error_rate = 0.0
        self.codes: tuple[int, ...] = (500,)
        self.latency_ms = 0.0
        self.drop_rate = 0.0
        self.retry_after_seconds = 1
        self.lost_response_rate = 0.0
        self.proxy_refused: dict[str, str] = {}
        self.seed = seed
        self._random = random.Random(seed)
        self._fired: dict[str, int] = {}
        self.update(
            error_rate=error_rate,
            codes=codes,
            latency_ms=latency_ms,
            drop_rate=drop_rate,
            retry_after_seconds=retry_after_seconds,
            lost_response_rate=lost_response_rate,
            proxy_refused=proxy_refused or {},
        )

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> ApiFaults:
        """Build from a scenario's ``faults.api`` mapping (``errorRate``, ``codes``, ``latencyMs``, ...)."""
        return cls(**_kwargs_from_spec(spec or {}))

    def update(self, **kwargs: Any) -> None:
        """Change settings at runtime; accepts the Python names (``error_rate``) or the scenario keys
        (``errorRate``). Invalid values raise ``ValueError`` and change nothing."""
        normalised = {_SPEC_KEYS.get(key, key): value for key, value in kwargs.items()}
        validated = _validated(normalised)
        with self._lock:
            for key, value in validated.items():
                if key == "seed":
                    self.seed = value
                    self._random = random.Random(value)
                else:
                    setattr(self, key, value)

    def to_spec(self) -> dict[str, Any]:
        """The current settings in the scenario's key names (what the control endpoint reports)."""
        with self._lock:
            spec: dict[str, Any] = {
                "errorRate": self.error_rate,
                "codes": list(self.codes),
                "latencyMs": self.latency_ms,
                "dropRate": self.drop_rate,
                "retryAfterSeconds": self.retry_after_seconds,
                "lostResponseRate": self.lost_response_rate,
            }
            if self.proxy_refused:
                spec["proxyRefused"] = dict(self.proxy_refused)
            return spec

    @property
    def active(self) -> bool:
        with self._lock:
            return self._active()

    def _active(self) -> bool:
        return self.error_rate > 0 or self.drop_rate > 0 or self.latency_ms > 0 or self.lost_response_rate > 0

    def fired(self) -> dict[str, int]:
        """How often each fault struck since the start: ``drop``, ``error:<code>``, ``lostResponse:drop``,
        ``lostResponse:504`` (a copy; the counts survive :meth:`update`)."""
        with self._lock:
            return dict(self._fired)

    def count_fired(self, fault: str) -> None:
        """Count one fault that struck; the server calls it for a lost response it actually lost (one whose
        write failed on its own had a real answer to give, which is sent)."""
        with self._lock:
            self._count(fault)

    def proxy_refusal(self, resource: str) -> str | None:
        """How a proxy request to ``resource`` (``pods``, ``services``) is refused, if it is; counted as
        ``proxyRefused:<resource>``."""
        with self._lock:
            refusal = self.proxy_refused.get(resource)
            if refusal is not None:
                self._count(f"proxyRefused:{resource}")
            return refusal

    def decide(self, *, write: bool) -> FaultDecision:
        """Draw the fate of one resource request (``write``: POST/PUT/PATCH/DELETE)."""
        with self._lock:
            if not self._active():
                return NO_FAULT
            latency = self.latency_ms / 1000.0
            if self.drop_rate > 0 and self._random.random() < self.drop_rate:
                self._count("drop")
                return FaultDecision(latency_seconds=latency, drop=True, error=None)
            error = None
            if self.error_rate > 0 and self._random.random() < self.error_rate:
                error = self._pick_error(write)
            if error is not None:
                self._count(f"error:{error.code}")
                return FaultDecision(latency_seconds=latency, drop=False, error=error)
            # drawn last and only when asked for, so seeds without lost responses keep their old sequence
            lost: LostResponse | None = None
            if write and self.lost_response_rate > 0 and self._random.random() < self.lost_response_rate:
                lost = "drop" if self._random.random() < 0.5 else "504"
            return FaultDecision(latency_seconds=latency, drop=False, error=None, lost_response=lost)

    def _count(self, fault: str) -> None:
        self._fired[fault] = self._fired.get(fault, 0) + 1

    def _pick_error(self, write: bool) -> InjectedError | None:
        # A read cannot conflict, so 409 is only drawn for writes; a read whose only code is 409 is served.
        candidates = [code for code in self.codes if write or code not in _WRITE_ONLY_CODES]
        if not candidates:
            return None
        code = self._random.choice(candidates)
        reason, message = FAULT_STATUS[code]
        retry_after = self.retry_after_seconds if code in (429, 503) else None
        return InjectedError(code=code, reason=reason, message=message, retry_after_seconds=retry_after)


def _kwargs_from_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(_SPEC_KEYS))
    if unknown:
        raise ValueError(f"unknown API fault key(s) {unknown}; known: {sorted(_SPEC_KEYS)}")
    return {_SPEC_KEYS[key]: value for key, value in spec.items()}


def _validated(values: Mapping[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if key in ("error_rate", "drop_rate", "lost_response_rate"):
            rate = float(value)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{key} must be between 0 and 1, got {value!r}")
            checked[key] = rate
        elif key == "latency_ms":
            if float(value) < 0:
                raise ValueError(f"latency_ms must not be negative, got {value!r}")
            checked[key] = float(value)
        elif key == "retry_after_seconds":
            if int(value) < 0:
                raise ValueError(f"retry_after_seconds must not be negative, got {value!r}")
            checked[key] = int(value)
        elif key == "codes":
            checked[key] = _validated_codes(value)
        elif key == "proxy_refused":
            checked[key] = _validated_refusals(value)
        elif key == "seed":
            checked[key] = None if value is None else int(value)
        elif key == "sleep":
            checked[key] = value
        else:
            raise ValueError(f"unknown API fault setting {key!r}")
    return checked


def _validated_codes(value: Any) -> tuple[int, ...]:
    codes = tuple(int(code) for code in ([value] if isinstance(value, int) else value))
    if not codes:
        raise ValueError("codes must name at least one HTTP status code")
    unsupported = [code for code in codes if code not in FAULT_STATUS]
    if unsupported:
        raise ValueError(f"unsupported fault code(s) {unsupported}; supported: {sorted(FAULT_STATUS)}")
    return codes


def _validated_refusals(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("proxy_refused must map pods or services to a refusal, e.g. {pods: forbidden}")
    for resource, refusal in value.items():
        allowed = PROXY_REFUSALS.get(str(resource))
        if allowed is None:
            raise ValueError(f"proxy_refused: unknown resource {resource!r}; known: {sorted(PROXY_REFUSALS)}")
        if refusal not in allowed:
            raise ValueError(f"proxy_refused: {resource} is refused with one of {sorted(allowed)}")
    return {str(resource): str(refusal) for resource, refusal in value.items()}
