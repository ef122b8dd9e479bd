"""When the simulated GPU Feature Discovery writes its node labels: at its passes, not at every evaluation.

The real GFD labels the node when it starts and then once every ``GFD_SLEEP_INTERVAL`` (60 s by default; the
DaemonSet gpuplan renders sets it, ``gpuplan.modules.gfd``). Between two passes nothing rewrites its labels,
so a hand edit (``kubectl label node x nvidia.com/gpu.product=foo --overwrite``) stays until the next pass.
The kubelet runtime evaluates a pod whenever its node changes, which would revert such an edit at once; this
module decides which of those evaluations are GFD passes:

- the first evaluation that yields labels after the GFD container (re)started (pod start, crash-loop
  restart, new image);
- an evaluation whose labels differ from what this GFD wrote last (its inputs changed: the driver NVML
  reports, the GPUs, the sharing config the config-manager selected; the real GFD restarts or relabels on
  those through its config-manager sidecar and driver pod restarts);
- the evaluation that each interval timer asks for (a background timer per GFD pod, so ``wait_idle`` never
  waits a whole interval).

The timestamp label is left out of the comparison: it moves with the clock, and only a pass writes it.

Owned by ``gpuplan.sim.kubelet.runtime.KubeletRuntime`` (on the loop thread, no locks).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.sim.controllers.cache import Key
from gpuplan.sim.controllers.loop import Loop, Timer
from gpuplan.sim.kubelet import gfd
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.outcomes import NodeEffect

TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"


class GfdPasses:
    """The labelling passes of every GFD pod the runtime runs."""

    def __init__(self, loop: Loop, request_evaluation: Callable[[Key], None]) -> None:
        """``request_evaluation(key)``: the runtime evaluates that pod soon (an interval pass is due)."""
        self.loop = loop
        self._request_evaluation = request_evaluation
        self._written: dict[Key, dict[str, str]] = {}  # the labels each GFD wrote at its last pass
        self._due: set[Key] = set()  # pods whose next labelling evaluation is a pass
        self._timers: dict[Key, Timer] = {}

    def started(self, key: Key, pod: Obj) -> None:
        """The GFD container of ``pod`` (re)started: it labels at once, then every sleep interval."""
        self._due.add(key)
        self._schedule(key, gfd.sleep_interval(pod))

    def labels_to_write(self, key: Key, effect: NodeEffect) -> NodeEffect | None:
        """``effect`` when this evaluation is a pass (and remember what it writes), else None: the node's
        labels are left as they are, edits included."""
        wanted = {k: v for k, v in effect.labels.items() if v is not None and k != TIMESTAMP_LABEL}
        if key not in self._due and wanted == self._written.get(key):
            return None  # GFD's effect is labels only
        self._due.discard(key)
        self._written[key] = wanted
        return effect

    def forget(self, key: Key) -> None:
        """The pod is gone (or no longer runs GFD): no more passes."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._due.discard(key)
        self._written.pop(key, None)

    def _schedule(self, key: Key, interval: float) -> None:
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous.cancel()

        def pass_due() -> None:
            if self._timers.get(key) is not timer:
                return
            self._due.add(key)
            self._request_evaluation(key)
            self._schedule(key, interval)

        # background: a GFD waiting for its next pass is idle, as far as wait_idle is concerned
        timer = self.loop.call_later(interval, pass_due, settling=False)
        self._timers[key] = timer
