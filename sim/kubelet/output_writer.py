"""Writes each container's output into the kubelet's log store as its runs start, report, crash and end.

After every evaluation of a pod the runtime hands over the status it wrote and the outcome; from the
container statuses this tells, per container, when a *run* begins (the container runs or crashed with a new
restartCount or image, or runs again after it crashed: the store's current run becomes the previous one),
what it prints (``container_output``: start lines, ready lines once the outcome is Ready, the outcome's
message for the container it is about, exit lines for a completed one) and when it ends (crashed or
terminated: followers of the run stop). A container that never started (ContainerCreating, image pull
errors, RunContainerError) prints nothing, so its log is "waiting to start". On the loop thread only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from gpuplan.sim.kubelet import container_output
from gpuplan.sim.kubelet.container_output import Context, Line
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.logs import ContainerLogs
from gpuplan.sim.kubelet.state import NodeGpuState


class Outcome(Protocol):
    @property
    def ready(self) -> bool: ...
    @property
    def init_done(self) -> int: ...
    @property
    def message(self) -> str | None: ...
    @property
    def crash_looping(self) -> bool: ...


@dataclass
class _Run:
    identity: tuple[Any, ...]  # (restartCount, image): a new one is a new run
    ended: bool = False
    ready: bool = False
    said: str | None = None  # the last message printed
    printed: set[str] = field(
        default_factory=set
    )  # this run's bodies: a message already said is not repeated


class OutputWriter:
    def __init__(self, logs: ContainerLogs, clock: Callable[[], datetime]) -> None:
        self.logs = logs
        self.clock = clock
        self._runs: dict[str, dict[str, _Run]] = {}  # pod uid -> container name -> its run

    def forget(self, uid: str) -> None:
        """The pod left its node (by its uid alone: a rollout forgets every pod of a fleet, one by one)."""
        self._runs.pop(uid, None)

    def observed(self, uid: str, pod: Obj, status: Obj, outcome: Outcome, state: NodeGpuState) -> None:
        """The pod was evaluated to ``outcome`` and ``status``: write what its containers printed since."""
        spec = pod.get("spec") or {}
        inits = list(spec.get("initContainers") or [])
        mains = list(spec.get("containers") or [])
        subject = inits[outcome.init_done] if outcome.init_done < len(inits) else (mains or [None])[0]
        statuses = {
            s.get("name"): s
            for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
        }
        for container in inits + mains:
            entry = statuses.get(container.get("name"))
            if entry is None:
                continue
            about = container is subject
            ctx = Context(pod, container, state, self.clock())
            self._container(uid, ctx, entry, outcome if about else None, about and outcome.ready)

    def _container(self, uid: str, ctx: Context, status: Obj, outcome: Outcome | None, ready: bool) -> None:
        state = status.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        crashed = waiting == "CrashLoopBackOff"
        if "running" not in state and "terminated" not in state and not crashed:
            return  # never started: nothing printed
        name = str(ctx.container.get("name", ""))
        runs = self._runs.setdefault(uid, {})
        identity = (status.get("restartCount", 0), ctx.container.get("image"))
        run = runs.get(name)
        program = container_output.program_of(ctx.pod, ctx.container)
        if run is None or run.identity != identity or (run.ended and "running" in state):
            if run is not None:
                self.logs.restart(uid, name)
            run = runs[name] = _Run(identity)
            self._write(uid, name, run, program.start(ctx))
        if run.ended:
            return
        sidecar_ready = outcome is None and "running" in state and bool(status.get("ready"))
        if (ready or sidecar_ready) and not run.ready:
            run.ready = True
            self._write(uid, name, run, program.ready(ctx))
        message = outcome.message if outcome is not None else None
        if message and message != run.said:
            run.said = message
            text = container_output.failure_text(message) if crashed else message
            said = [
                program.say(ctx, line, crashed)
                for line in text.splitlines()
                if line and not any(body.endswith(line) for body in run.printed)
            ]
            self._write(uid, name, run, said)
        if crashed or "terminated" in state:
            if "terminated" in state and (state["terminated"] or {}).get("exitCode", 0) == 0:
                self._write(uid, name, run, program.exit(ctx))
            run.ended = True
            self.logs.finish(uid, name)

    def _write(self, uid: str, container: str, run: _Run, lines: list[Line]) -> None:
        # the bodies the run remembers are the logs' own strings (interned), not a copy per pod
        run.printed.update(sys.intern(body) for _, body in lines)
        if lines:
            self.logs.write_lines(uid, container, lines, now=self.clock())
