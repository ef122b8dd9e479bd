"""The simulator's control API under ``/sim/v1/``: faults and node events at runtime, over HTTP.

The API server (``gpuplan.sim.api.server``) passes every ``/sim/...`` request (after the token check, and
never subject to API faults) to :meth:`Control.handle`, which answers ``(status code, JSON body)``:

    GET    /sim/v1/status                     scenario, node count, uptime, url
    GET    /sim/v1/faults                     images, slowImages, api, gpus, nodes (not ready)
    PUT    /sim/v1/faults                     replace the sections given in the body
    PATCH  /sim/v1/faults                     merge: per image / GPU, null removes
    POST   /sim/v1/nodes                      add nodes from a NodeSpec body (a node joining during an apply)
    DELETE /sim/v1/nodes/{name}               remove a node
    POST   /sim/v1/nodes/{name}/notready      body optional {"reason": "unreachable" | "not-ready"}
    POST   /sim/v1/nodes/{name}/ready
    PUT    /sim/v1/nodes/{name}/hostdriver    body {"version": V}: the node's host driver is now V
    POST   /sim/v1/idle                       body optional {"timeoutSeconds": N}: wait until the cluster's
                                              nodes and controllers have nothing left to do; {"idle": bool}
    POST   /sim/v1/cronjobs/{namespace}/{name}/run   body optional {"job": NAME}: a Job from the CronJob now
    GET    /sim/v1/clock                      the Job and CronJob controllers' clock (now, speed)
    POST   /sim/v1/clock                      body {"advanceSeconds": N}: move that clock on (it then stands)

Errors are metav1 Status bodies like the rest of the API (400 BadRequest, 404 NotFound, 405).
Every action is the Python API of ``gpuplan.sim.cluster.Simulator``, which this module only routes to.
"""

from __future__ import annotations

from typing import Any, Protocol

from gpuplan.sim.api import store as store_mod

Body = dict[str, Any]


class Controllable(Protocol):
    """What ``Simulator`` offers the control API."""

    def status(self) -> Body: ...
    def faults(self) -> Body: ...
    def set_image_fault(self, image: str, kind: str | None) -> None: ...
    def set_slow_image(self, image: str, seconds: float | None) -> None: ...
    def set_api_faults(self, **kwargs: Any) -> None: ...
    def clear_api_faults(self) -> None: ...
    def set_gpu_fault(self, node: str, gpu: int, **kwargs: Any) -> None: ...
    def clear_gpu_faults(self, node: str | None = None) -> None: ...
    def set_node_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> None: ...
    def set_host_driver(self, node: str, version: str) -> None: ...
    def wait_idle(self, timeout: float = 10.0) -> bool: ...
    def add_node(self, spec: Body) -> list[str]: ...
    def remove_node(self, name: str) -> None: ...
    def run_cronjob(self, namespace: str, name: str, job: str | None = None) -> Body: ...
    def batch_clock(self) -> Body: ...
    def advance_batch_clock(self, seconds: float) -> Body: ...


class ControlError(ValueError):
    """A malformed control request (400)."""


class Control:
    """Routes ``/sim/v1/...`` requests to a :class:`Controllable` simulator."""

    def __init__(self, sim: Controllable) -> None:
        self.sim = sim

    def handle(self, method: str, path: str, body: Body | None) -> tuple[int, Body]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        try:
            if parts[:2] != ["sim", "v1"]:
                return _status(404, "NotFound", f"unknown control path {path}")
            return self._route(method.upper(), parts[2:], body or {})
        except ControlError as exc:
            return _status(400, "BadRequest", str(exc))
        except (TypeError, ValueError) as exc:
            return _status(400, "BadRequest", str(exc))
        except store_mod.ApiError as exc:
            return exc.code, exc.status()

    def _route(self, method: str, rest: list[str], body: Body) -> tuple[int, Body]:
        if rest == ["status"]:
            return _only(method, "GET") or (200, self.sim.status())
        if rest == ["faults"]:
            if method == "GET":
                return 200, self.sim.faults()
            if method in ("PUT", "PATCH"):
                self._set_faults(body, replace=method == "PUT")
                return 200, self.sim.faults()
            return _method_not_allowed(method)
        if rest == ["nodes"]:
            return _only(method, "POST") or (201, {"kind": "NodeList", "added": self.sim.add_node(body)})
        if len(rest) == 2 and rest[0] == "nodes":
            if method != "DELETE":
                return _method_not_allowed(method)
            self.sim.remove_node(rest[1])
            return _success(rest[1])
        if len(rest) == 3 and rest[0] == "nodes" and rest[2] in ("ready", "notready"):
            if method != "POST":
                return _method_not_allowed(method)
            reason = body.get("reason", "unreachable")
            if reason not in ("unreachable", "not-ready"):
                raise ControlError(f'reason must be "unreachable" or "not-ready", not {reason!r}')
            self.sim.set_node_ready(rest[1], rest[2] == "ready", unreachable=reason == "unreachable")
            return _success(rest[1])
        if len(rest) == 3 and rest[0] == "nodes" and rest[2] == "hostdriver":
            version = body.get("version")
            if not isinstance(version, str) or not version:
                raise ControlError("version must be a driver version such as 580.105.08")
            if method != "PUT":
                return _method_not_allowed(method)
            self.sim.set_host_driver(rest[1], version)
            return _success(rest[1])
        if rest == ["idle"]:
            timeout = body.get("timeoutSeconds", 10)
            if not isinstance(timeout, (int, float)) or not 0 <= timeout <= 600:
                raise ControlError("timeoutSeconds must be a number of seconds from 0 to 600")
            return _only(method, "POST") or (200, {"idle": self.sim.wait_idle(float(timeout))})
        if len(rest) == 4 and rest[0] == "cronjobs" and rest[3] == "run":
            job = body.get("job")
            return _only(method, "POST") or (
                201,
                self.sim.run_cronjob(rest[1], rest[2], str(job) if job else None),
            )
        if rest == ["clock"]:
            if method == "GET":
                return 200, self.sim.batch_clock()
            seconds = body.get("advanceSeconds")
            if not isinstance(seconds, (int, float)) or seconds < 0:
                raise ControlError("advanceSeconds must be a number of seconds >= 0")
            return _only(method, "POST") or (200, self.sim.advance_batch_clock(float(seconds)))
        return _status(404, "NotFound", f"unknown control path /sim/v1/{'/'.join(rest)}")

    def _set_faults(self, body: Body, *, replace: bool) -> None:
        unknown = set(body) - {"images", "slowImages", "api", "gpus", "nodes"}
        if unknown:
            raise ControlError(
                f"unknown fault sections {sorted(unknown)}; valid: images, slowImages, api, gpus, nodes"
            )
        current = self.sim.faults()
        if "images" in body:
            self._set_map(current["images"], _mapping(body, "images"), replace, self.sim.set_image_fault)
        if "slowImages" in body:
            self._set_map(
                current["slowImages"], _mapping(body, "slowImages"), replace, self.sim.set_slow_image
            )
        if "api" in body:
            self._set_api(body["api"], replace)
        if "gpus" in body:
            self._set_gpus(body["gpus"], replace)
        if "nodes" in body:
            wanted = {str(f["node"]): not f.get("notReady", True) for f in _list(body, "nodes")}
            if replace:  # nodes down now but not listed come back
                wanted = {**{str(f["node"]): True for f in current["nodes"]}, **wanted}
            for node, ready in wanted.items():
                self.sim.set_node_ready(node, ready)

    @staticmethod
    def _set_map(current: Body, wanted: Body, replace: bool, setter: Any) -> None:
        if replace:
            for key in set(current) - set(wanted):
                setter(key, None)
        for key, value in wanted.items():
            setter(key, value)

    def _set_api(self, api: Body | None, replace: bool) -> None:
        if api is None:
            self.sim.clear_api_faults()
            return
        if not isinstance(api, dict):
            raise ControlError("api must be an object like {errorRate: 0.1, codes: [500, 429]}")
        if replace:
            self.sim.clear_api_faults()
        names = {
            "errorRate": "error_rate",
            "codes": "codes",
            "latencyMs": "latency_ms",
            "dropRate": "drop_rate",
            "retryAfterSeconds": "retry_after_seconds",
            "lostResponseRate": "lost_response_rate",
            "seed": "seed",
        }
        unknown = set(api) - set(names)
        if unknown:
            raise ControlError(f"unknown api fault keys {sorted(unknown)}; valid: {', '.join(names)}")
        kwargs = {names[k]: (tuple(v) if k == "codes" else v) for k, v in api.items()}
        self.sim.set_api_faults(**kwargs)

    def _set_gpus(self, gpus: Any, replace: bool) -> None:
        if not isinstance(gpus, list):
            raise ControlError(
                "gpus must be a list like [{node: gpu-0001, gpu: 0, temperature: 95, xid: 79}]"
            )
        if replace:
            self.sim.clear_gpu_faults()
        for fault in gpus:
            fault = dict(fault)
            node, gpu = fault.pop("node", None), fault.pop("gpu", 0)
            if node is None:
                raise ControlError("every GPU fault needs a node")
            self.sim.set_gpu_fault(str(node), int(gpu), **fault)


def _mapping(body: Body, key: str) -> Body:
    value = body[key]
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ControlError(f"{key} must be an object mapping image to value")
    return value


def _list(body: Body, key: str) -> list[Body]:
    value = body[key]
    if not isinstance(value, list) or not all(isinstance(v, dict) and "node" in v for v in value):
        raise ControlError(f"{key} must be a list of objects with a node")
    return value


def _success(name: str) -> tuple[int, Body]:
    return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}


def _only(method: str, allowed: str) -> tuple[int, Body] | None:
    return None if method == allowed else _method_not_allowed(method)


def _method_not_allowed(method: str) -> tuple[int, Body]:
    return _status(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
    )


def _status(code: int, reason: str, message: str) -> tuple[int, Body]:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
