"""The disruption controller and the eviction API it feeds, on a store and loop without HTTP: a
PodDisruptionBudget's status as kube-controller-manager computes it, and pods/eviction spending it.

Both clocks (the store's wall clock, which stamps disruptedPods, and the loop's timers) run from one offset
the tests move, so a disruptedPods entry expires without waiting two minutes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import ApiError, Store
from gpuplan.sim.controllers.disruption import DisruptionController
from gpuplan.sim.controllers.loop import Loop

Obj = dict[str, Any]
START = datetime(2026, 1, 1, tzinfo=UTC)


class Env:
    def __init__(self) -> None:
        self.offset = 0.0
        self.store = Store(Registry.builtin(), clock=lambda: START + timedelta(seconds=self.offset))
        self.loop = Loop(self.store, clock=lambda: 1000.0 + self.offset)
        self.loop.add_handler(DisruptionController(self.loop, clock=self.store.clock))
        self.loop.subscribe()
        self.loop.start()
        self.pods = self.store.registry.for_kind("v1", "Pod")
        self.pdbs = self.store.registry.for_kind("policy/v1", "PodDisruptionBudget")
        self.events = self.store.registry.for_kind("v1", "Event")

    def settle(self) -> None:
        assert self.loop.wait_idle(10)
        assert self.store.flush(10)
        assert self.loop.wait_idle(10)

    def advance(self, seconds: float) -> None:
        """Move both clocks; a call through the loop wakes it to run the timers now due."""
        self.offset += seconds
        self.loop.run_sync(lambda: None)
        self.settle()

    def pod(
        self, name: str, labels: dict[str, str] | None = None, owner: Obj | None = None, node: str = ""
    ) -> None:
        """A running, ready pod (as its kubelet reports it); bound to ``node``, an eviction leaves it
        Terminating (no kubelet here finishes it), unbound it goes at once."""
        meta: Obj = {"name": name, "labels": labels or {"app": "web"}}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        spec: Obj = {"containers": [{"name": "c", "image": "i"}], **({"nodeName": node} if node else {})}
        self.store.create(self.pods, {"metadata": meta, "spec": spec}, namespace="default", manager="test")
        self.set_ready(name, True)

    def set_ready(self, name: str, ready: bool) -> None:
        condition = {"type": "Ready", "status": str(ready), "lastTransitionTime": "2026-01-01T00:00:00Z"}
        body = {"status": {"phase": "Running", "conditions": [condition]}}
        self.store.patch(
            self.pods,
            "default",
            name,
            body,
            "application/merge-patch+json",
            manager="kubelet",
            subresource="status",
        )

    def pdb(self, name: str = "web", **spec: Any) -> Obj:
        body = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}
        return self.store.create(self.pdbs, body, namespace="default", manager="test")

    def status(self, name: str = "web") -> Obj:
        status: Obj = self.store.get(self.pdbs, "default", name)["status"]
        return status

    def reasons(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in self.store.list(self.events, namespace="default").items]

    def close(self) -> None:
        self.loop.stop()
        self.store.close()
        assert not self.loop.errors, self.loop.errors


@pytest.fixture
def env() -> Iterator[Env]:
    made = Env()
    yield made
    made.close()


def _counts(status: Obj) -> tuple[int, int, int, int]:
    return (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    )


def _condition(status: Obj) -> tuple[str, str, str]:
    [cond] = status["conditions"]
    return cond["type"], cond["status"], cond["reason"]


def _refused_as_still_processed(env: Env, pod: str) -> None:
    """The 429 of a budget whose generation the controller has not observed: retry in 10 s."""
    with pytest.raises(ApiError) as refused:
        env.store.evict("default", pod)
    assert (refused.value.code, refused.value.retry_after) == (429, 10)
    assert refused.value.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",  # metav1.StatusCause.Type is json "reason"
                "message": "The disruption budget web is still being processed by the server.",
            }
        ]
    }


def test_an_integer_min_available_counts_the_matching_ready_pods(env: Env) -> None:
    env.pdb(minAvailable=2)
    env.settle()
    assert _counts(env.status()) == (0, 2, 0, 0)
    assert ("NoPods", "No matching pods found") in env.reasons()
    for name in ("web-0", "web-1", "web-2"):
        env.pod(name)
    env.pod("other", labels={"app": "other"})
    env.settle()
    status = env.status()
    assert _counts(status) == (3, 2, 3, 1)
    assert status["observedGeneration"] == 1
    assert _condition(status) == ("DisruptionAllowed", "True", "SufficientPods")
    env.set_ready("web-2", False)
    env.settle()
    assert _counts(env.status()) == (3, 2, 2, 0)
    assert _condition(env.status()) == ("DisruptionAllowed", "False", "InsufficientPods")


def test_max_unavailable_takes_the_expected_pods_from_the_deployment_scale(env: Env) -> None:
    deployments = env.store.registry.for_kind("apps/v1", "Deployment")
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    deployment = env.store.create(
        deployments,
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        },
        namespace="default",
        manager="test",
    )
    for name in ("web-0", "web-1", "web-2"):
        env.pod(name, owner={**deployment, "apiVersion": "apps/v1", "kind": "Deployment"})
    env.pdb(maxUnavailable="30%")  # 30% of 4 rounds up to 2
    env.settle()
    assert _counts(env.status()) == (4, 2, 3, 1)
    env.store.patch(
        env.pdbs, "default", "web", {"spec": {"maxUnavailable": None, "minAvailable": "50%"}},
        "application/merge-patch+json", manager="test",
    )  # fmt: skip
    env.settle()
    status = env.status()
    assert status["observedGeneration"] == 2  # a spec change is a new generation, observed
    assert _counts(status) == (4, 2, 3, 1)


def test_daemonset_pods_under_max_unavailable_fail_the_sync_as_on_a_real_cluster(env: Env) -> None:
    """getExpectedScale knows no DaemonSet: its scale subresource is looked up, and there is none. The
    eviction API then refuses with the message of a budget it thinks the controller has not seen yet."""
    daemonsets = env.store.registry.for_kind("apps/v1", "DaemonSet")
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    ds = env.store.create(
        daemonsets,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template},
        },
        namespace="default",
        manager="test",
    )
    env.pod("web-0", owner={**ds, "apiVersion": "apps/v1", "kind": "DaemonSet"})
    env.pdb(maxUnavailable=0)
    env.settle()
    status = env.status()
    [cond] = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "SyncFailed")
    assert cond["message"] == "daemonsets.apps does not implement the scale subresource"
    assert status["disruptionsAllowed"] == 0
    assert (
        "CalculateExpectedPodCountFailed",
        "Failed to calculate the number of expected pods: daemonsets.apps does not implement the scale "
        "subresource",
    ) in env.reasons()
    # failSafe never sets observedGeneration: the budget stays "being processed" for the eviction API
    assert "observedGeneration" not in status
    _refused_as_still_processed(env, "web-0")


def test_pods_without_a_controller_count_for_nothing_under_max_unavailable(env: Env) -> None:
    env.pod("web-0")
    env.pdb(maxUnavailable=1)
    env.settle()
    assert _counts(env.status()) == (0, 0, 1, 0)  # no pod expected: no disruption allowed
    [(reason, message)] = [r for r in env.reasons() if r[0] == "UnmanagedPods"]
    assert "(selector: &LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:" in message


def test_an_eviction_spends_the_budget_and_the_last_one_is_refused(env: Env) -> None:
    env.pod("web-0")
    env.pod("web-1")
    env.pdb(minAvailable=1)
    env.settle()
    assert env.store.evict("default", "web-0")["status"] == "Success"
    env.settle()
    assert "web-0" not in [p["metadata"]["name"] for p in env.store.list(env.pods).items]
    status = env.status()
    assert _counts(status) == (1, 1, 1, 0)
    assert "disruptedPods" not in status  # the pod went: the controller dropped its entry
    with pytest.raises(ApiError) as refused:
        env.store.evict("default", "web-1")
    error = refused.value
    assert (error.code, error.reason) == (429, "TooManyRequests")
    assert error.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert error.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",  # metav1.StatusCause.Type is json "reason"
                "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
            }
        ]
    }
    assert error.retry_after is None
    assert env.store.get(env.pods, "default", "web-1")["metadata"].get("deletionTimestamp") is None


def test_the_eviction_records_the_pod_and_marks_it_a_disruption_target(env: Env) -> None:
    env.pod("web-0", node="n1")  # the evicted pod stays Terminating, as on a slow node
    env.pod("web-1")
    env.pdb(minAvailable=1)
    env.settle()
    env.store.evict("default", "web-0")
    status = env.store.get(env.pdbs, "default", "web")["status"]
    assert status["disruptedPods"] == {"web-0": "2026-01-01T00:00:00Z"}
    pod = env.store.get(env.pods, "default", "web-0")
    assert pod["metadata"]["deletionTimestamp"]
    [target] = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


def test_an_entry_the_pod_never_followed_expires_after_two_minutes(env: Env) -> None:
    """The eviction API wrote the entry, but the pod was not deleted: it counts as going for two minutes."""
    env.pod("web-0")
    env.pod("web-1")
    env.pdb(minAvailable=1)
    env.settle()
    pdb = env.store.get(env.pdbs, "default", "web")
    pdb["status"] = {**pdb["status"], "disruptedPods": {"web-0": "2026-01-01T00:00:00Z"}}
    env.store.update(env.pdbs, pdb, namespace="default", name="web", manager="test", subresource="status")
    env.settle()
    assert _counts(env.status()) == (2, 1, 1, 0)
    env.advance(119)
    assert env.status()["disruptedPods"] == {"web-0": "2026-01-01T00:00:00Z"}
    env.advance(2)  # the recheck timer at the entry's expiry
    status = env.status()
    assert "disruptedPods" not in status
    assert _counts(status) == (2, 1, 2, 1)
    assert (
        "NotDeleted",
        "Pod was expected by PDB default/default to be deleted but it wasn't",
    ) in env.reasons()


def test_more_than_one_budget_is_a_server_error(env: Env) -> None:
    env.pdb("a", minAvailable=0)
    env.pdb("b", minAvailable=0)
    env.pod("web-0")  # a pod event: the controller looks for its budget and finds two
    env.settle()
    with pytest.raises(ApiError) as refused:
        env.store.evict("default", "web-0")
    assert refused.value.code == 500
    assert refused.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
        "support.",
        "code": 500,
    }
    assert (
        "MultiplePodDisruptionBudgets",
        'Pod "default"/"web-0" matches multiple PodDisruptionBudgets.  Chose "a" arbitrarily.',
    ) in env.reasons()


def test_an_unready_pod_goes_without_spending_a_healthy_budget(env: Env) -> None:
    for name in ("web-0", "web-1", "web-2"):
        env.pod(name)
    env.pdb(minAvailable=2)
    env.settle()
    env.set_ready("web-2", False)
    env.settle()
    assert _counts(env.status()) == (3, 2, 2, 0)
    env.store.evict("default", "web-2")  # IfHealthyBudget: 2 healthy of 2 desired, so it may go
    assert "disruptedPods" not in env.store.get(env.pdbs, "default", "web")["status"]
    env.set_ready("web-1", False)
    env.settle()
    with pytest.raises(ApiError) as refused:  # the budget is not met: the unready pod is guarded too
        env.store.evict("default", "web-1")
    assert refused.value.code == 429
    env.store.patch(
        env.pdbs, "default", "web", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}},
        "application/merge-patch+json", manager="test",
    )  # fmt: skip
    env.settle()
    assert env.store.evict("default", "web-1")["status"] == "Success"


def test_a_budget_whose_generation_is_not_observed_yet_asks_to_retry(env: Env) -> None:
    env.pod("web-0")
    env.pod("web-1")
    env.pdb(minAvailable=0)
    env.settle()
    env.loop.stop()  # the controller sees no more changes
    env.store.patch(
        env.pdbs, "default", "web", {"spec": {"minAvailable": 1}}, "application/merge-patch+json", manager="t"
    )
    _refused_as_still_processed(env, "web-0")


def test_a_conflict_on_the_budget_reads_it_again(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer changes the budget between the eviction's read and its write: the write conflicts,
    and the retry spends the budget as it is now."""
    for name in ("web-0", "web-1", "web-2"):
        env.pod(name)
    env.pdb(minAvailable=1)
    env.settle()
    env.loop.stop()
    real_update = env.store.update
    raced: list[str] = []

    def update(rt: Any, obj: Obj, **kwargs: Any) -> Obj:
        if rt is env.pdbs and not raced:
            raced.append("once")
            current = env.store.get(env.pdbs, "default", "web")
            current["status"]["disruptedPods"] = {"web-2": "2026-01-01T00:00:00Z"}
            current["status"]["disruptionsAllowed"] = 1
            real_update(rt, current, namespace="default", name="web", manager="other", subresource="status")
        return real_update(rt, obj, **kwargs)

    monkeypatch.setattr(env.store, "update", update)
    assert env.store.evict("default", "web-0")["status"] == "Success"
    status = env.store.get(env.pdbs, "default", "web")["status"]
    assert status["disruptedPods"] == {"web-0": "2026-01-01T00:00:00Z", "web-2": "2026-01-01T00:00:00Z"}
    assert status["disruptionsAllowed"] == 0
