"""The mig-manager (``nvcr.io/nvidia/cloud-native/k8s-mig-manager``) on a simulated node: the reconfigure
flow of fleet facts §4.4, driven by its Node's ``nvidia.com/mig.config`` label.

The real one runs an informer on its Node; here the kubelet runtime evaluates the pod whenever the node's
labels or its pods change, and :class:`MigManagers` carries the flow between those evaluations. For each new
value of the label:

1. the config file is read from the ConfigMap mounted at ``CONFIG_FILE`` (a custom config) or
   ``DEFAULT_CONFIG_FILE`` (the operator's ``default-mig-parted-config``); a name it lacks, or a geometry
   the GPUs cannot take (a profile they do not have, fleet facts §4.3), sets
   ``nvidia.com/mig.config.state=failed`` and changes nothing (mig-parted's validation; the simulator
   refuses before pausing anything);
2. a config the GPUs already have sets ``success`` without touching the operands;
3. otherwise ``pending``, and the ``nvidia.com/gpu.deploy.{device-plugin,gpu-feature-discovery,dcgm-exporter,
   dcgm,nvsm}`` labels become ``paused-for-mig-change`` (a ``false`` stays ``false``; an absent one is
   paused too, as ``maybeSetPaused`` does). The operands' DaemonSets stop matching the node (the operator's
   select ``=true``; gpuplan's a required node affinity ``NotIn`` the paused values, ``gpuplan.modules.
   common``), so their pods go;
4. once no pod of those operands (``app=`` labels of §4.4) is left on the node, the validator pods
   (``app=nvidia-cuda-validator``, ``app=nvidia-device-plugin-validator``) are deleted and the geometry is
   applied, which takes ``timing.migReconfigureSeconds``;
5. the deploy labels go back (``true``, ``false`` kept) and the state is ``success``: the operands return
   and advertise and label the new MIG devices (``gpuplan.sim.kubelet.mig``).

A label changed while a reconfiguration is under way is taken up once that one finishes, as the real one
processes the latest value after its current run. Like the real one it acts on a new value of the label
(and once when it starts), not on other changes of its node: a ``failed`` stays until the label changes.
Labels are written as field manager
``nvidia-mig-manager``. Owned by ``gpuplan.sim.kubelet.runtime.KubeletRuntime`` (loop thread, no locks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplan.sim.controllers.cache import Key
from gpuplan.sim.controllers.loop import Loop, Timer
from gpuplan.sim.kubelet import checks, images, mig
from gpuplan.sim.kubelet.dcgm import mounted_file
from gpuplan.sim.kubelet.images import Obj, env_value, main_container
from gpuplan.sim.kubelet.outcomes import NodeEffect, PodContext, PodOutcome, running
from gpuplan.sim.kubelet.state import NodeGpuState

MANAGER = "nvidia-mig-manager"
PAUSED = "paused-for-mig-change"
WAITING = "Waiting for change to 'nvidia.com/mig.config' label"
# deploy label -> the app label of the operand's pods (nvsm has none: nothing to wait for)
OPERANDS = {
    "device-plugin": "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "dcgm": "nvidia-dcgm",
    "nvsm": "",
}
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")


@dataclass
class _Flow:
    """One reconfiguration in progress on a node."""

    config: str
    geometry: mig.Geometry
    restore: dict[str, str]  # deploy label -> its value afterwards
    paused: dict[str, str]  # deploy label -> its value meanwhile
    phase: str = "pausing"  # pausing -> applying -> done
    timer: Timer | None = field(default=None, repr=False)


class MigManagers:
    """The reconfigurations of every mig-manager pod the runtime runs."""

    def __init__(
        self,
        loop: Loop,
        *,
        seconds: Callable[[], float],
        request_evaluation: Callable[[Key], None],
        delete_pod: Callable[[Obj], None],
    ) -> None:
        """``seconds()``: how long applying a geometry takes; ``delete_pod(pod)``: deletes it (API)."""
        self.loop = loop
        self._seconds = seconds
        self._request_evaluation = request_evaluation
        self._delete_pod = delete_pod
        self._flows: dict[Key, _Flow] = {}
        self._done: dict[Key, tuple[str, PodOutcome]] = {}  # the label value last handled, and its outcome

    def outcome(
        self, key: Key, pod: Obj, node: NodeGpuState, base: PodOutcome, ctx: PodContext
    ) -> PodOutcome:
        """The pod's outcome with the flow's step for its node's current label (``base`` when not running)."""
        if not base.ready:
            return base
        flow = self._flows.get(key)
        if flow is not None:
            return self._continue(key, pod, node, flow, base.init_done)
        wanted = node.labels.get(mig.CONFIG_LABEL)
        if not wanted:
            return running(base.init_done, message=WAITING)
        done = self._done.get(key)
        if done is not None and done[0] == wanted:
            return done[1]  # it acts on a change of the label, not on every change of the node
        try:
            geometry = _geometry(pod, node, wanted, ctx)
        except mig.MigConfigError as exc:
            return self._handled(key, wanted, running(base.init_done, _state("failed"), f"Error: {exc}"))
        if mig.applied(node, geometry):
            success = running(
                base.init_done, _state("success"), f"Successfully updated to MIG config: {wanted}"
            )
            return self._handled(key, wanted, success)
        flow = _start(wanted, geometry, node)
        self._flows[key] = flow
        return self._continue(key, pod, node, flow, base.init_done)

    def forget(self, key: Key) -> None:
        """The pod is gone: a reconfiguration it had begun stops (its labels stay as they are)."""
        flow = self._flows.pop(key, None)
        if flow is not None and flow.timer is not None:
            flow.timer.cancel()
        self._done.pop(key, None)

    def _handled(self, key: Key, wanted: str, outcome: PodOutcome) -> PodOutcome:
        self._done[key] = (wanted, outcome)
        return outcome

    def _continue(self, key: Key, pod: Obj, node: NodeGpuState, flow: _Flow, init_done: int) -> PodOutcome:
        pending = NodeEffect(labels={**flow.paused, mig.STATE_LABEL: "pending"}, manager=MANAGER)
        if flow.phase == "pausing":
            waiting = self._operand_pods(node.node.name, flow)
            if waiting:
                return running(init_done, pending, f"Waiting for {waiting[0]} pods to be deleted")
            for validator in self._pods(node.node.name, VALIDATOR_APPS):
                self._delete_pod(validator)
            flow.phase = "applying"
            flow.timer = self.loop.call_later(self._seconds(), lambda: self._applied(key, node, flow))
        if flow.phase == "applying":
            return running(init_done, pending, f"Applying the selected MIG config to the node: {flow.config}")
        del self._flows[key]
        message = f"Successfully updated to MIG config: {flow.config}"
        # later evaluations keep the state only: the deploy labels are restored once, as the real one does,
        # and a driver upgrade's pause of them afterwards is not undone
        self._handled(key, flow.config, running(init_done, _state("success"), message))
        restored = NodeEffect(labels={**flow.restore, mig.STATE_LABEL: "success"}, manager=MANAGER)
        return running(init_done, restored, message)

    def _applied(self, key: Key, node: NodeGpuState, flow: _Flow) -> None:
        if self._flows.get(key) is not flow:
            return
        node.mig = mig.with_geometry(node, flow.geometry)
        flow.phase, flow.timer = "done", None
        self._request_evaluation(key)

    def _operand_pods(self, node: str, flow: _Flow) -> list[str]:
        apps = tuple(OPERANDS[label.rsplit(".", 1)[1]] for label in flow.paused)
        return sorted(
            {str(p["metadata"]["labels"]["app"]) for p in self._pods(node, tuple(a for a in apps if a))}
        )

    def _pods(self, node: str, apps: tuple[str, ...]) -> list[Obj]:
        return [
            p for p in self.loop.cache.pods_on(node) if (p["metadata"].get("labels") or {}).get("app") in apps
        ]


def _start(wanted: str, geometry: mig.Geometry, node: NodeGpuState) -> _Flow:
    """Steps 3-5's labels, from the deploy labels' values now (``maybeSetPaused`` / ``maybeSetTrue``)."""
    labels = {
        f"nvidia.com/gpu.deploy.{name}": node.labels.get(f"nvidia.com/gpu.deploy.{name}", "")
        for name in OPERANDS
    }
    paused = {k: "false" if v == "false" else PAUSED for k, v in labels.items()}
    restore = {k: "false" if v == "false" else "true" for k, v in labels.items()}
    return _Flow(wanted, geometry, restore, paused)


def _geometry(pod: Obj, node: NodeGpuState, wanted: str, ctx: PodContext) -> mig.Geometry:
    container = main_container(pod) or {}
    path = env_value(container, "CONFIG_FILE") or env_value(container, "DEFAULT_CONFIG_FILE") or ""
    text = mounted_file(pod, container, path, ctx.config_lookup) if path else None
    if text is None:
        raise mig.MigConfigError(f"error reading MIG config file: open {path}: no such file or directory")
    configs = mig.parse_config(text)
    if wanted not in configs:
        raise mig.MigConfigError(f"error validating MIG config: config '{wanted}' not present in {path}")
    return mig.geometry(configs[wanted], node)


def _state(value: str) -> NodeEffect:
    return NodeEffect(labels={mig.STATE_LABEL: value}, manager=MANAGER)


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The container itself: running once it has the GPUs (the flow above does the rest)."""
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    return running(len(images.init_containers(pod)), message=WAITING)
