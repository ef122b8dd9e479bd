"""The kubelet's crash-loop back-off for one container, scaled to the scenario's ``crashLoopBackoffSeconds``.

The real kubelet restarts a crashing container after 10 s, 20 s, 40 s ... capped at 300 s
(``MaxContainerBackOff``), and forgets the back-off once the container has run twice that cap (10 minutes)
without crashing (``flowcontrol.Backoff``'s expiry of an entry not updated for 2 x maxDuration). The simulator
keeps the ratios and scales the first delay: ``base`` (0.2 s by default) doubling up to 30 x ``base``, reset
after a run of 60 x ``base``. The container's restartCount is not the back-off's business: it never resets.

Used by ``gpuplan.sim.kubelet.runtime`` (one ``BackOff`` per pod record, times read from its injectable
clock) and by ``gpuplan.sim.kubelet.pods`` (the delay a ``CrashLoopBackOff`` message names).
"""

from __future__ import annotations

from dataclasses import dataclass

CAP_FACTOR = 30  # 10 s doubling up to 300 s: 30 times the first delay
RESET_FACTOR = 2 * CAP_FACTOR  # a run of 2 x the cap (10 minutes) without a crash forgets the back-off
REAL_FIRST_DELAY_SECONDS = 10


def delay(base: float, step: int) -> float:
    """Seconds before the ``step``-th restart (1, 2, ...) since the back-off began: ``base`` doubled per
    earlier step, capped at ``CAP_FACTOR`` x ``base`` (with 0.2 s: 0.2, 0.4, 0.8 ... 6 s)."""
    doublings: int = max(step - 1, 0)
    factor: int = min(1 << doublings, CAP_FACTOR)
    return base * factor


@dataclass
class BackOff:
    """One container's back-off: how far it went, and since when the container runs without crashing."""

    step: int = 0  # restarts asked in the current back-off (0: none yet)
    running_since: float | None = None  # clock time it last (re)started and has not crashed since

    def running(self, now: float) -> None:
        """The container runs (started, or found not crashing): its crash-free run counts from now on."""
        if self.running_since is None:
            self.running_since = now

    def restarted(self, now: float) -> None:
        """The kubelet restarted it after a back-off: a new run begins."""
        self.running_since = now

    def crashed(self, base: float, now: float) -> float:
        """It crashed: the delay before its next restart, one step further, or the first delay again when
        it had run ``RESET_FACTOR`` x ``base`` since it last started."""
        ran = 0.0 if self.running_since is None else now - self.running_since
        self.running_since = None
        self.step = 1 if ran >= RESET_FACTOR * base else self.step + 1
        return delay(base, self.step)
