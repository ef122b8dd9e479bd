"""Applying the lab stack through 10% injected API errors (429 with Retry-After, 500, 503, 504) and
writes whose response is lost after they landed (the simulator's ``lost_response_rate``) still converges,
with no duplicate objects.

A duplicate here means what it would mean on a real cluster: an object of the stack that is not the one the
state recorded (another uid under the recorded name, or one the state does not know), or a second copy under
a generated name (two pods of one DaemonSet on one node). Fixed names alone prove nothing: the API server
keeps them unique whatever the client does. The faults are shown to have fired through the simulator's
counters.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from lab_stack import LAB_SPEC

from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan import build as plan_mod
from gpuplan.planner.plan.build import Plan
from gpuplan.planner.spec import model as spec_mod
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import STACK_LABEL, LiveObject, ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.model import StateFile

HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
RETRY_AFTER_SECONDS = 2
# The default 5 attempts make a run through 20% faulty writes fail now and then by chance alone (five faults
# in a row on one object); this test is about duplicates, so it gives the retries room and checks the rest.
RETRY = RetryPolicy(attempts=10)


@dataclass
class Sleeps:
    """The writers' retry waits, recorded instead of slept (thread-safe: the apply runs components in
    parallel); proves Retry-After was honoured without costing the test its seconds."""

    seconds: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, seconds: float) -> None:
        with self.lock:
            self.seconds.append(seconds)


@dataclass
class Recorded:
    events: list[ApplyEvent] = field(default_factory=list)

    def on_event(self, event: ApplyEvent) -> None:
        self.events.append(event)


@dataclass
class FaultyLab:
    sim: Simulator
    kubeconfig: str
    sleeps: Sleeps
    backend: MemoryBackend = field(default_factory=MemoryBackend)

    def writer(self) -> KubernetesWriter:
        return KubernetesWriter(kubeconfig=self.kubeconfig, sleep=self.sleeps, retry=RETRY)

    def plan(self, writer: KubernetesWriter) -> Plan:
        spec = spec_mod.parse_spec(LAB_SPEC, filename="gpustack.yaml")
        snapshot = refresh.refresh(writer, spec, self.backend.read())
        return plan_mod.make_plan(spec, self.backend.read(), snapshot)


@pytest.fixture
def faulty_lab(sim_factory: SimFactory, tmp_path: Any) -> Iterator[FaultyLab]:
    sim = sim_factory("lab")
    assert sim.wait_idle(30)
    lab = FaultyLab(sim, str(sim.write_kubeconfig(tmp_path / "kubeconfig")), Sleeps())
    with lab.writer() as writer:
        writer.delete(HAND)  # the hand-made plugin would be a conflict, not something to apply through
    yield lab


def _stack_objects(
    writer: KubernetesWriter, api_version: str, kind: str
) -> dict[tuple[str | None, str], str]:
    listing = writer.list_objects(api_version, kind, label_selector=f"{STACK_LABEL}=lab")
    found = [(item.key.namespace, item.key.name, item.uid) for item in listing.items]
    assert len(found) == len({(ns, name) for ns, name, _ in found})
    return {(ns, name): uid for ns, name, uid in found}


def _assert_each_object_is_its_state_record(writer: KubernetesWriter, state: StateFile) -> None:
    kinds = {(record.api_version, record.kind) for record in state.resources.values()}
    for api_version, kind in sorted(kinds):
        recorded = {
            (r.namespace, r.name): r.uid
            for r in state.resources.values()
            if (r.api_version, r.kind) == (api_version, kind)
        }
        assert all(recorded.values()), f"a {kind} record has no uid"
        assert _stack_objects(writer, api_version, kind) == recorded, kind


def _assert_one_pod_per_node_per_daemonset(writer: KubernetesWriter, state: StateFile) -> None:
    daemonsets: dict[str, LiveObject] = {}
    for record in state.resources.values():
        if record.kind == "DaemonSet":
            live = writer.read(ObjectKey(record.api_version, record.kind, record.namespace, record.name))
            assert live is not None
            daemonsets[live.uid] = live
    assert daemonsets
    pods = [pod for pod in writer.list_pods().items if not pod.metadata.get("deletionTimestamp")]
    placed: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        owners = [ref["uid"] for ref in pod.metadata.get("ownerReferences") or [] if ref.get("controller")]
        if pod.labels.get(STACK_LABEL) == "lab":  # a stack pod is always some recorded DaemonSet's
            assert owners and owners[0] in daemonsets, pod.key.ref
        if owners and owners[0] in daemonsets:
            placed[(owners[0], str(pod.manifest["spec"].get("nodeName")))] += 1
    assert placed and max(placed.values()) == 1, placed
    for uid, daemonset in daemonsets.items():
        desired = daemonset.manifest["status"]["desiredNumberScheduled"]
        assert sum(count for (owner, _), count in placed.items() if owner == uid) == desired, (
            daemonset.key.ref
        )


def test_lost_responses_and_ten_percent_errors_converge_without_duplicates(faulty_lab: FaultyLab) -> None:
    lab = faulty_lab
    hooks = Recorded()
    options = ApplyOptions(writer_factory=lab.writer, poll_seconds=0.5)
    with lab.writer() as writer:
        # Plan and apply both run through the faults: the plan's reads double the requests the faults draw
        # from (about a hundred), so each kind below fires in practice whatever the threads' interleaving.
        # Lost responses strike 30% of writes, not 10%: the stack is 20 creates, and at 10% a run with none
        # lost would happen about one time in eight, proving nothing.
        lab.sim.set_api_faults(
            error_rate=0.1,
            codes=(429, 500, 503),
            retry_after_seconds=RETRY_AFTER_SECONDS,
            lost_response_rate=0.3,
            seed=11,
        )
        try:
            plan = lab.plan(writer)
            assert plan.has_changes
            result = apply(
                plan,
                spec=spec_mod.parse_spec(LAB_SPEC, filename="gpustack.yaml"),
                backend=lab.backend,
                writer=writer,
                hooks=hooks,
                options=options,
            )
        finally:
            lab.sim.clear_api_faults()
        fired = lab.sim.api_faults.fired()

        assert result.ok, result.message
        assert fired.get("lostResponse:drop", 0) + fired.get("lostResponse:504", 0) > 0, fired
        assert sum(fired.get(f"error:{code}", 0) for code in (429, 500, 503)) > 0, fired
        # 429 and 503 carry Retry-After; the writers waited exactly that rather than their own backoff
        assert RETRY_AFTER_SECONDS in lab.sleeps.seconds, (fired, lab.sleeps.seconds)

        assert hooks.events[-1].type == "summary" and hooks.events[-1].state == "ok"
        state = lab.backend.read()
        assert state is not None and not state.journal and len(result.changed) == len(state.resources) == 28
        _assert_each_object_is_its_state_record(writer, state)
        _assert_one_pod_per_node_per_daemonset(writer, state)
        assert not lab.plan(writer).has_changes
