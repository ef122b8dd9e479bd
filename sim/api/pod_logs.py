"""``GET /api/v1/namespaces/{ns}/pods/{name}/log``: what the apiserver checks, then what the kubelet answers.

The apiserver's part (``pkg/registry/core/pod/strategy.go`` LogLocation and ``ValidatePodLogOptions``):
the container defaults to the only one, several need ``container`` (400 "a container name must be
specified for pod X, choose one of: [a b] or one of the init containers: [i]"), an unknown one is 400
"container c is not valid for pod X", a pod bound to no node answers an empty body; ``tailLines`` >= 0,
``limitBytes`` and ``sinceSeconds`` > 0, at most one of ``sinceTime``/``sinceSeconds`` (422 Invalid).

The kubelet's part (``pkg/kubelet/kubelet_pods.go`` validateContainerLogStatus), from the container's status:
a running or terminated container serves its current run; one waiting to restart after a crash serves the run
that crashed; ``previous`` serves the run before the current one (400 "previous terminated container c in pod
p not found" when there is none); a container that never started is 400 "container c in pod p is waiting to
start: ContainerCreating". Then ``sinceSeconds``/``sinceTime``, ``tailLines``, ``timestamps`` and
``limitBytes`` are applied in that order; ``follow`` streams the run until it ends (the container stopped,
crashed, restarted or its pod went away), the client leaves, or the server stops.

The lines come from a :class:`LogSource` (the kubelets' ``ContainerLogs``), read from the connection's
thread: that store is locked for exactly this reader.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from gpuplan.sim.api.handlers import _int_param  # the query's integers, parsed as every handler does
from gpuplan.sim.api.protocol import HttpError, Request, Response

TEXT = "text/plain"


class LogLine(Protocol):
    @property
    def time(self) -> datetime: ...
    @property
    def text(self) -> str: ...


class LogSource(Protocol):
    """The kubelets' container logs by pod uid and container name (``gpuplan.sim.kubelet.logs``)."""

    def read(self, uid: str, container: str, *, previous: bool = False) -> list[Any]: ...

    def read_current(self, uid: str, container: str) -> tuple[list[Any], Any]: ...

    def follow(
        self,
        uid: str,
        container: str,
        *,
        cursor: Any = None,
        gone: Callable[[], bool] | None = None,
    ) -> Iterator[Any]: ...

    def has(self, uid: str, container: str, *, previous: bool = False) -> bool: ...


class LogStream:
    """A followed log: the lines already written, then each new one, as chunks of text."""

    code = 200
    content_type = TEXT

    def __init__(
        self,
        head: bytes,
        rest: Iterator[Any],
        render: Callable[[Any], bytes],
        stopping: threading.Event,
        limit_bytes: int | None = None,
    ) -> None:
        self._head, self._rest, self._render, self._stopping = head, rest, render, stopping
        self._left = limit_bytes  # limitBytes ends a followed log too
        self.client_gone: Callable[[], bool] = lambda: False

    def chunks(self) -> Iterator[bytes]:
        for chunk in self._all():
            if self._left is not None:
                chunk, self._left = chunk[: self._left], self._left - len(chunk)
            if chunk:
                yield chunk
            if self._left is not None and self._left <= 0:
                return

    def _all(self) -> Iterator[bytes]:
        if self._head:
            yield self._head
        for line in self._rest:
            yield self._render(line)

    def gone(self) -> bool:
        return self._stopping.is_set() or self.client_gone()

    def close(self) -> None:
        close = getattr(self._rest, "close", None)
        if close is not None:
            close()


def container_names(pod: dict[str, Any], field: str) -> list[str]:
    return [str(c.get("name", "")) for c in (pod.get("spec") or {}).get(field) or []]


def choose_container(pod: dict[str, Any], requested: str | None) -> str:
    """The container a log or exec request addresses, with the apiserver's 400s."""
    name = pod["metadata"]["name"]
    mains, inits = container_names(pod, "containers"), container_names(pod, "initContainers")
    if not requested:
        if len(mains) == 1:
            return mains[0]
        if not mains:
            raise HttpError(400, "BadRequest", f"a container name must be specified for pod {name}")
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(mains)}]"
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise HttpError(400, "BadRequest", message)
    if requested not in mains + inits:
        raise HttpError(400, "BadRequest", f"container {requested} is not valid for pod {name}")
    return requested


def container_status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == container:
            return dict(entry)
    return {}


class LogOptions:
    """The query of a pods/log request, validated as ``ValidatePodLogOptions`` does."""

    def __init__(self, request: Request, pod_name: str) -> None:
        self.follow = request.flag("follow")
        self.previous = request.flag("previous")
        self.timestamps = request.flag("timestamps")
        self.tail_lines = _int_param(request, "tailLines")
        self.limit_bytes = _int_param(request, "limitBytes")
        self.since_seconds = _int_param(request, "sinceSeconds")
        self.since_time = _time(request.param("sinceTime"))
        problems = []
        if self.tail_lines is not None and self.tail_lines < 0:
            problems.append(
                f"tailLines: Invalid value: {self.tail_lines}: must be greater than or equal to 0"
            )
        if self.limit_bytes is not None and self.limit_bytes < 1:
            problems.append(f"limitBytes: Invalid value: {self.limit_bytes}: must be greater than 0")
        if self.since_seconds is not None and self.since_time is not None:
            problems.append(
                "sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
            )
        elif self.since_seconds is not None and self.since_seconds < 1:
            problems.append(f"sinceSeconds: Invalid value: {self.since_seconds}: must be greater than 0")
        if problems:
            raise HttpError(
                422,
                "Invalid",
                f'PodLogOptions "{pod_name}" is invalid: {", ".join(problems)}',
                {"name": pod_name, "kind": "PodLogOptions"},
            )

    def since(self, now: datetime) -> datetime | None:
        if self.since_seconds is not None:
            return now - timedelta(seconds=self.since_seconds)
        return self.since_time

    def render(self, line: Any) -> bytes:
        prefix = f"{rfc3339_nano(line.time)} " if self.timestamps else ""
        return f"{prefix}{line.text}\n".encode()


def rfc3339_nano(when: datetime) -> str:
    """Go's time.RFC3339Nano, as the kubelet prefixes ``timestamps`` (trailing zeros dropped)."""
    utc = when.astimezone(UTC)
    fraction = f"{utc.microsecond:06d}000".rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def serve_log(
    pod: dict[str, Any], request: Request, logs: LogSource, stopping: threading.Event
) -> Response | LogStream:
    """The answer to one pods/log request for ``pod`` (read from the store by the caller)."""
    name = pod["metadata"]["name"]
    container = choose_container(pod, request.param("container"))
    options = LogOptions(request, name)
    if not (pod.get("spec") or {}).get("nodeName"):
        return Response(200, b"", TEXT)
    uid = str(pod["metadata"].get("uid", ""))
    previous = _which_run(pod, container, options.previous, uid, logs)
    following = options.follow and not previous
    if following:
        written, cursor = logs.read_current(uid, container)  # and where to follow on from
    else:
        written, cursor = logs.read(uid, container, previous=previous), None
    lines = written
    since = options.since(datetime.now(UTC))
    if since is not None:
        lines = [line for line in lines if line.time >= since]
    if options.tail_lines is not None:
        lines = lines[len(lines) - options.tail_lines :] if options.tail_lines else []
    head = b"".join(options.render(line) for line in lines)
    if not following:
        return Response(200, head[: options.limit_bytes], TEXT)
    holder: list[LogStream] = []
    rest = logs.follow(uid, container, cursor=cursor, gone=lambda: bool(holder) and holder[0].gone())
    stream = LogStream(head, rest, options.render, stopping, options.limit_bytes)
    holder.append(stream)
    return stream


def _which_run(pod: dict[str, Any], container: str, previous: bool, uid: str, logs: LogSource) -> bool:
    """Whether to read the store's previous run (else its current one), or the kubelet's 400."""
    status = container_status(pod, container)
    state = status.get("state") or {}
    pod_name = pod["metadata"]["name"]
    crashed = "waiting" in state and "terminated" in (status.get("lastState") or {})
    if previous:
        # while it waits to restart, the run that crashed is both the current and the "previous" one
        if crashed and logs.has(uid, container):
            return False
        if not logs.has(uid, container, previous=True):
            raise HttpError(
                400,
                "BadRequest",
                f'previous terminated container "{container}" in pod "{pod_name}" not found',
            )
        return True
    if "running" in state or "terminated" in state or crashed or logs.has(uid, container):
        return False
    reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
    detail = {
        "ErrImagePull": "image can't be pulled",
        "ImagePullBackOff": "trying and failing to pull image",
    }.get(reason, reason)
    raise HttpError(
        400, "BadRequest", f'container "{container}" in pod "{pod_name}" is waiting to start: {detail}'
    )


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise HttpError(400, "BadRequest", f'invalid sinceTime value "{value}"') from None
