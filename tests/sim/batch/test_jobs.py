"""The Job controller on the simulator's loop: pods from the template (unbound: a scheduler and kubelet run
them), counted by the phases a kubelet writes, and the status and conditions of 1.31+."""

from __future__ import annotations

from batch_kit import T0, Batch

from gpuplan.sim.controllers.jobs import TRACKING_FINALIZER


def test_pods_carry_the_job_s_labels_owner_and_tracking_finalizer_and_no_node(batch: Batch) -> None:
    job = batch.create_job("work")
    (pod,) = batch.pods("work")
    meta, uid = pod["metadata"], job["metadata"]["uid"]
    assert meta["generateName"] == "work-" and meta["name"].startswith("work-")
    assert meta["labels"] == {
        "app": "work",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "work",
        "controller-uid": uid,
        "job-name": "work",
    }
    assert meta["finalizers"] == [TRACKING_FINALIZER]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "work",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert "nodeName" not in pod["spec"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    status = batch.job("work")["status"]
    assert status == {
        "active": 1,
        "ready": 0,
        "terminating": 0,
        "startTime": "2026-03-02T10:07:30Z",
        "uncountedTerminatedPods": {},
    }


def test_parallelism_and_completions_until_complete(batch: Batch) -> None:
    batch.create_job("three", parallelism=2, completions=3)
    first, second = batch.pods("three")
    batch.set_phase(first, "Running", ready=True)
    assert batch.job("three")["status"]["ready"] == 1
    batch.set_phase(first, "Succeeded")
    pods = batch.pods("three")
    assert len(pods) == 3 and batch.job("three")["status"]["active"] == 2  # one more for the third completion
    done = next(p for p in pods if p["metadata"]["name"] == first["metadata"]["name"])
    assert TRACKING_FINALIZER not in (done["metadata"].get("finalizers") or [])
    for pod in pods:
        if pod["metadata"]["name"] != first["metadata"]["name"]:
            batch.set_phase(pod, "Succeeded")
    status = batch.job("three")["status"]
    assert (
        status["succeeded"] == 3
        and "active" not in status
        and status["completionTime"] == "2026-03-02T10:07:30Z"
    )
    assert batch.conditions("three") == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]
    assert all(not p["metadata"].get("finalizers") for p in batch.pods("three"))


def test_without_completions_one_success_ends_it_once_the_others_stop(batch: Batch) -> None:
    batch.create_job("queue", parallelism=2, completions=None)
    first, second = batch.pods("queue")
    batch.set_phase(first, "Succeeded")
    # the other pod is deleted; unbound, it is gone at once (its tracking finalizer released)
    assert [p["metadata"]["name"] for p in batch.pods("queue")] == [first["metadata"]["name"]]
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert batch.conditions("queue") == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]
    assert batch.job("queue")["status"]["succeeded"] == 1


def test_failed_pods_are_replaced_after_the_back_off_and_past_the_limit_fail_the_job(batch: Batch) -> None:
    batch.create_job("flaky", backoffLimit=2)
    batch.set_phase(batch.pods("flaky")[0], "Failed")
    assert batch.job("flaky")["status"]["failed"] == 1 and "active" not in batch.job("flaky")["status"]
    batch.sim.advance_batch_clock(9)
    assert batch.sim.wait_idle() and len(batch.pods("flaky")) == 1  # 10 s after the first failure
    batch.sim.advance_batch_clock(1)
    assert batch.sim.wait_for(lambda: len(batch.pods("flaky")) == 2)
    batch.set_phase(next(p for p in batch.pods("flaky") if p["status"]["phase"] == "Pending"), "Failed")
    batch.sim.advance_batch_clock(19)
    assert batch.sim.wait_idle() and len(batch.pods("flaky")) == 2  # then 20 s
    batch.sim.advance_batch_clock(1)
    assert batch.sim.wait_for(lambda: len(batch.pods("flaky")) == 3)
    batch.set_phase(next(p for p in batch.pods("flaky") if p["status"]["phase"] == "Pending"), "Failed")
    status = batch.job("flaky")["status"]
    assert status["failed"] == 3 and "completionTime" not in status
    assert batch.conditions("flaky") == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]
    assert [c["message"] for c in status["conditions"]] == ["Job has reached the specified backoff limit"] * 2


def test_the_active_deadline_fails_the_job_and_stops_its_pods(batch: Batch) -> None:
    batch.create_job("slow", activeDeadlineSeconds=60)
    batch.set_phase(batch.pods("slow")[0], "Running", ready=True)
    batch.sim.advance_batch_clock(59)
    assert batch.sim.wait_idle() and batch.conditions("slow") == []
    batch.sim.advance_batch_clock(1)
    assert batch.sim.wait_for(lambda: ("Failed", "DeadlineExceeded") in batch.conditions("slow"))
    assert batch.conditions("slow")[0] == ("FailureTarget", "DeadlineExceeded")
    assert batch.pods("slow") == []  # the unbound pod is deleted at once, its finalizer released


def test_a_finished_job_goes_after_its_ttl(batch: Batch) -> None:
    batch.create_job("brief", ttlSecondsAfterFinished=100)
    batch.set_phase(batch.pods("brief")[0], "Succeeded")
    batch.sim.advance_batch_clock(99)
    assert batch.sim.wait_idle() and batch.job("brief")["status"]["succeeded"] == 1
    batch.sim.advance_batch_clock(1)
    assert batch.sim.wait_for(lambda: not batch.sim.store.list(batch.jobs_rt, namespace="default").items)
    assert batch.pods("brief") == []


def test_suspended_jobs_run_no_pods(batch: Batch) -> None:
    batch.create_job("held", suspend=True)
    assert batch.pods("held") == []
    assert "startTime" not in batch.job("held")["status"]
    assert T0.year == 2026


def test_a_deleted_job_s_pods_lose_their_finalizer_and_go(batch: Batch) -> None:
    batch.create_job("gone", parallelism=2, completions=2)
    for pod in batch.pods("gone"):
        batch.set_phase(pod, "Running", ready=True)
    batch.sim.store.delete(batch.jobs_rt, "default", "gone", propagation="Background")
    assert batch.sim.wait_for(lambda: batch.pods("gone") == [])
