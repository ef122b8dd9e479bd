"""The events kube-scheduler and the kubelets write about pods, derived from the pods' own transitions.

The simulated kubelets (``gpuplan.sim.kubelet.runtime``) write pod status; a real kubelet writes Events as it
goes through the same steps. This handler watches each pod change on the loop (old and new status) and
records what a real cluster records at that step, per container (``involvedObject.fieldPath``
``spec.containers{name}`` or ``spec.initContainers{name}``):

=============================================  ==========================================================
transition                                     events (source)
=============================================  ==========================================================
pod bound to a node (created bound by the      Normal Scheduled ``Successfully assigned ns/pod to node``
DaemonSet controller, or through binding)      (default-scheduler)
container waiting ContainerCreating (or        Normal Pulling ``Pulling image "img"`` (kubelet, the node)
first start, behind init containers) container running, or restarted                Normal Pulled
(``Successfully pulled image ...`` the first
                                               time, ``Container image ... already present on machine``
                                               after), Created, Started
waiting ErrImagePull                           Warning Failed ``Failed to pull image "img": <why>`` and
                                               Warning Failed ``Error: ErrImagePull``
waiting ImagePullBackOff                       Normal BackOff ``Back-off pulling image "img"`` and
                                               Warning Failed ``Error: ImagePullBackOff``
waiting CrashLoopBackOff (each restart)        Warning BackOff ``Back-off restarting failed container c
                                               in pod p_ns(uid)``
=============================================  ==========================================================

Repeats aggregate into one Event with a growing ``count`` and the spam filter bounds each pod's events
(``gpuplan.sim.controllers.events``), so a crash loop costs a few patches per restart until that pod's bucket
is spent, and nothing per timer tick. Pods created bound to a node by a client (not a DaemonSet's) bypass
the scheduler: no Scheduled.

A container whose image is already on its node (an earlier container there pulled it) and whose
``imagePullPolicy`` is not ``Always`` is not pulled: no Pulling, and its Pulled reads ``Container image "img"
already present on machine``, as ``EnsureImageExists`` in kubernetes pkg/kubelet/images/image_manager.go
decides (``shouldPullImage``: Never never pulls, Always always does, IfNotPresent when the image is absent).
The images on each node are those its containers pulled successfully, forgotten with the node.

Registered by ``gpuplan.sim.controllers.loop.Loop`` itself (every simulated cluster records events); records
in ``flush`` the transitions ``on_change`` collected, in change order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.sim.controllers.cache import Change, Obj
from gpuplan.sim.controllers.events import NORMAL, WARNING, EventRecorder, Source

if TYPE_CHECKING:
    from gpuplan.sim.controllers.loop import Loop

SCHEDULER = Source("default-scheduler")
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
# Waiting reasons that follow a pull: the image came (and the container then failed) or it did not.
PULL_OUTCOMES = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "RunContainerError",
        "CreateContainerConfigError",
    }
)


@dataclass(frozen=True)
class _Pending:
    pod: Obj
    type_: str
    reason: str
    message: str
    source: Source
    field_path: str = ""


class PodEvents:
    """A loop handler turning pod transitions into scheduler and kubelet Events."""

    def __init__(
        self,
        loop: Loop,
        recorder: EventRecorder,
        *,
        scheduler: bool = True,
        kubelets: Callable[[str], bool] | None = None,
    ) -> None:
        """``scheduler``: record the scheduler's ``Scheduled``; ``kubelets(node)``: record that node's kubelet
        events (None: every node's). Where the control plane and the kubelets are different processes
        (``sim.agent``), each records only its own part, as kube-scheduler and each kubelet do."""
        self.loop = loop
        self.recorder = recorder
        self.scheduler = scheduler
        self.kubelets = kubelets
        self._pending: list[_Pending] = []
        self._pulling_since: dict[tuple[str, str], float] = {}  # (pod uid, container) -> loop clock
        self._images: dict[str, set[str]] = {}  # node -> the images its containers pulled

    def on_change(self, change: Change) -> None:
        if change.kind == "nodes" and change.new is None:
            self._images.pop(change.key[1], None)
        if change.kind != "pods" or change.new is None:
            return
        old, new = change.old, change.new
        node = (new.get("spec") or {}).get("nodeName") or ""
        if (
            self.scheduler
            and node
            and not ((old or {}).get("spec") or {}).get("nodeName")
            and _scheduled_by_scheduler(old, new)
        ):
            meta = new["metadata"]
            self._pending.append(
                _Pending(
                    new,
                    NORMAL,
                    "Scheduled",
                    f"Successfully assigned {meta.get('namespace', '')}/{meta['name']} to {node}",
                    SCHEDULER,
                )
            )
        if not node or (self.kubelets is not None and not self.kubelets(node)):
            return
        kubelet = Source("kubelet", node)
        uid = str(new["metadata"].get("uid") or "")
        images = self._images.setdefault(node, set())
        for field, before, after in _container_pairs(old, new):
            path = f"spec.{field}{{{after['name']}}}"
            present = after.get("image", "") in images and _pull_policy(new, field, after) != "Always"
            for type_, reason, message in container_events(new, before, after, present=present):
                if reason == "Pulled" and message.startswith("Successfully pulled"):
                    images.add(after.get("image", ""))
                self._pending.append(
                    _Pending(new, type_, reason, self._timed(uid, after, reason, message), kubelet, path)
                )

    def _timed(self, uid: str, container: Obj, reason: str, message: str) -> str:
        """A first pull's message says how long it took, from Pulling to Pulled, as the kubelet's does."""
        key = (uid, str(container.get("name")))
        if reason == "Pulling":
            self._pulling_since[key] = self.loop.clock()
        elif reason in ("Pulled", "Failed") and key in self._pulling_since:
            took = go_duration(self.loop.clock() - self._pulling_since.pop(key))
            if reason == "Pulled" and message.startswith("Successfully pulled"):
                return f"{message} in {took} ({took} including waiting)"
        return message

    def flush(self) -> bool:
        if not self._pending:
            return False
        pending, self._pending = self._pending, []
        for item in pending:
            self.recorder.record(
                item.pod, item.type_, item.reason, item.message, item.source, field_path=item.field_path
            )
        return True


def container_events(
    pod: Obj, before: Obj | None, after: Obj, *, present: bool = False
) -> list[tuple[str, str, str]]:
    """(type, reason, message) of what a kubelet reports when a container's status goes ``before`` ->
    ``after``. ``present``: its image is on the node and its pull policy does not pull it again."""
    image = after.get("image", "")
    was_waiting, waiting = _waiting(before), _waiting(after)
    restarts, restarts_before = (
        int(after.get("restartCount") or 0),
        int((before or {}).get("restartCount") or 0),
    )
    events: list[tuple[str, str, str]] = []
    pulling = (NORMAL, "Pulling", f'Pulling image "{image}"')
    # An init container's or a main container's pull starts when the kubelet gets to it: ContainerCreating,
    # or (behind init containers, which the simulated kubelet reports as PodInitializing throughout) its
    # first start or pull failure.
    not_pulled_yet = before is None or (was_waiting == "PodInitializing" and not _ever_started(before))
    if not present and (
        waiting == "ContainerCreating"
        and not_pulled_yet
        or not_pulled_yet
        and (_running(after) or _exited(after) or waiting in PULL_OUTCOMES)
    ):
        events.append(pulling)
    first = not present
    if _running(after) and not _running(before) or (_running(after) and restarts > restarts_before):
        events += _started(after, first=first and restarts == 0 and not _ever_started(before))
    elif _exited(after) and not _exited(before) and not _running(before):
        events += _started(
            after, first=first and restarts == 0 and not _ever_started(before)
        )  # it ran, then ended
    elif waiting == "CrashLoopBackOff" and (was_waiting != waiting or restarts > restarts_before):
        if before is None or was_waiting in STARTING:
            events += _started(after, first=first)  # it ran once before it crashed
        elif restarts > restarts_before:
            events += _started(after, first=False)  # the restart ran before it crashed again
        meta = pod["metadata"]
        events.append(
            (
                WARNING,
                "BackOff",
                f"Back-off restarting failed container {after['name']} in pod "
                f"{meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})",
            )
        )
    elif waiting == "ErrImagePull" and was_waiting != waiting:
        why = ((after.get("state") or {}).get("waiting") or {}).get("message") or "image not found"
        events += [
            (WARNING, "Failed", f'Failed to pull image "{image}": {why}'),
            (WARNING, "Failed", "Error: ErrImagePull"),
        ]
    elif waiting == "ImagePullBackOff" and was_waiting != waiting:
        events += [
            (NORMAL, "BackOff", f'Back-off pulling image "{image}"'),
            (WARNING, "Failed", "Error: ImagePullBackOff"),
        ]
    elif waiting in ("RunContainerError", "CreateContainerConfigError") and was_waiting != waiting:
        why = ((after.get("state") or {}).get("waiting") or {}).get("message") or waiting
        events.append((WARNING, "Failed", f"Error: {why}"))
    return events


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` for the kubelet's pull times: ``850.5ms``, ``1.2345s``, ``1m2.5s``."""
    nanos = max(int(round(seconds * 1e9)), 0)
    if nanos == 0:
        return "0s"
    if nanos < 1_000_000:
        return f"{nanos / 1000:g}µs" if nanos >= 1000 else f"{nanos}ns"
    if nanos < 1_000_000_000:
        return f"{nanos / 1e6:.6f}".rstrip("0").rstrip(".") + "ms"
    minutes, rest = divmod(nanos, 60_000_000_000)
    secs = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes}m{secs}" if minutes else secs


def _started(status: Obj, *, first: bool) -> list[tuple[str, str, str]]:
    image, name = status.get("image", ""), status["name"]
    pulled = (
        f'Successfully pulled image "{image}"'
        if first
        else f'Container image "{image}" already present on machine'
    )
    return [
        (NORMAL, "Pulled", pulled),
        (NORMAL, "Created", f"Created container: {name}"),
        (NORMAL, "Started", f"Started container {name}"),
    ]


def _pull_policy(pod: Obj, field: str, status: Obj) -> str:
    """The ``imagePullPolicy`` of the spec container ``status`` reports on (defaulted at create)."""
    for container in (pod.get("spec") or {}).get(field) or []:
        if isinstance(container, dict) and container.get("name") == status.get("name"):
            return str(container.get("imagePullPolicy") or "")
    return ""


def _container_pairs(old: Obj | None, new: Obj) -> list[tuple[str, Obj | None, Obj]]:
    """(spec field, old status, new status) of every container in ``new``'s status."""
    pairs: list[tuple[str, Obj | None, Obj]] = []
    for field, status_field in (
        ("initContainers", "initContainerStatuses"),
        ("containers", "containerStatuses"),
    ):
        before = {s.get("name"): s for s in ((old or {}).get("status") or {}).get(status_field) or []}
        for after in (new.get("status") or {}).get(status_field) or []:
            if isinstance(after, dict) and after.get("name"):
                pairs.append((field, before.get(after["name"]), after))
    return pairs


def _waiting(status: Obj | None) -> str | None:
    waiting = ((status or {}).get("state") or {}).get("waiting")
    return str(waiting.get("reason") or "") if isinstance(waiting, dict) else None


def _running(status: Obj | None) -> bool:
    return "running" in ((status or {}).get("state") or {})


def _exited(status: Obj | None) -> bool:
    return "terminated" in ((status or {}).get("state") or {})


def _ever_started(status: Obj | None) -> bool:
    """Whether the container had run before (a restart, or a status that already carries a container id)."""
    return bool((status or {}).get("containerID")) or int((status or {}).get("restartCount") or 0) > 0


def _scheduled_by_scheduler(old: Obj | None, new: Obj) -> bool:
    """A pod the default scheduler placed: bound by the pods/binding subresource (it had no node before), or
    a DaemonSet's pod (the simulator's DaemonSet controller binds it at create, where a real cluster's
    scheduler binds it)."""
    if old is not None:
        return True
    refs: list[Any] = new["metadata"].get("ownerReferences") or []
    return any(r.get("controller") and r.get("kind") == "DaemonSet" for r in refs)
