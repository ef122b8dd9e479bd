"""The CronJob controller through the real kubectl: Jobs on schedule (on the batch clock the tests move),
concurrency policies, history limits, suspend, starting deadlines, time zones, `kubectl create job --from`,
the control API's run, and the tables kubectl prints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from batch_kit import Batch

from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers.cron import parse
from gpuplan.sim.controllers.cronjobs import SCHEDULED_TIMESTAMP
from gpuplan.sim.testing import Kubectl, SimFactory

CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {{name: report, namespace: default}}
spec:
  schedule: "{schedule}"
  {extra}
  jobTemplate:
    metadata: {{labels: {{app: report}}}}
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{{name: c, image: busybox}}]
"""


class Cron:
    def __init__(self, sim: Simulator, kubectl: Kubectl) -> None:
        self.sim, self.kubectl, self.batch = sim, kubectl, Batch(sim)

    def create(self, schedule: str = "*/5 * * * *", **extra: Any) -> dict[str, Any]:
        lines = "\n  ".join(f"{key}: {json.dumps(value)}" for key, value in extra.items())
        self.kubectl("apply", "-f", "-", input=CRONJOB.format(schedule=schedule, extra=lines))
        assert self.sim.wait_idle()
        return self.cronjob()

    def cronjob(self) -> dict[str, Any]:
        return self.sim.store.get(self.batch.cronjobs_rt, "default", "report")

    def jobs(self) -> list[str]:
        return sorted(
            j["metadata"]["name"] for j in self.sim.store.list(self.batch.jobs_rt, namespace="default").items
        )

    def advance_to(self, moment: datetime) -> None:
        self.sim.advance_batch_clock((moment - self.sim.clock.now()).total_seconds())
        assert self.sim.wait_idle()

    def nth_run(self, n: int, schedule: str = "*/5 * * * *") -> datetime:
        created = datetime.fromisoformat(
            self.cronjob()["metadata"]["creationTimestamp"].replace("Z", "+00:00")
        )
        moment = created
        for _ in range(n):
            found = parse(schedule).next(moment)
            assert found is not None
            moment = found
        return moment

    def finish(self, job: str, phase: str = "Succeeded") -> None:
        for pod in self.batch.pods(job):
            self.batch.set_phase(pod, phase)


@pytest.fixture
def cron(lab_sim: Simulator, kubectl: Kubectl) -> Cron:
    lab_sim.clock.freeze(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1))
    return Cron(lab_sim, kubectl)


def minutes(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def test_a_job_per_scheduled_time_named_by_its_minute(cron: Cron, kubectl: Kubectl) -> None:
    cron.create()
    assert cron.jobs() == []
    first = cron.nth_run(1)
    cron.advance_to(first - timedelta(seconds=1))
    assert cron.jobs() == []
    cron.advance_to(first)
    name = f"report-{minutes(first)}"
    assert cron.jobs() == [name]
    job = cron.batch.job(name)
    assert job["metadata"]["annotations"] == {SCHEDULED_TIMESTAMP: first.strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert job["metadata"]["labels"] == {"app": "report"}
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("CronJob", "report", True)
    status = cron.cronjob()["status"]
    assert status["lastScheduleTime"] == first.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [ref["name"] for ref in status["active"]] == [name]
    cron.finish(name)
    status = cron.cronjob()["status"]
    assert "active" not in status and status["lastSuccessfulTime"] == status["lastScheduleTime"]
    events = kubectl("get", "events", "--field-selector=involvedObject.kind=CronJob", "-o", "json").stdout
    assert {e["reason"] for e in json.loads(events)["items"]} == {"SuccessfulCreate", "SawCompletedJob"}


def test_forbid_skips_a_run_while_one_is_active_and_replace_replaces_it(cron: Cron) -> None:
    cron.create(concurrencyPolicy="Forbid")
    cron.advance_to(cron.nth_run(1))
    cron.advance_to(cron.nth_run(2))
    assert cron.jobs() == [f"report-{minutes(cron.nth_run(1))}"]
    cron.kubectl("patch", "cronjob", "report", "-p", '{"spec":{"concurrencyPolicy":"Replace"}}')
    cron.advance_to(cron.nth_run(3))
    assert cron.jobs() == [f"report-{minutes(cron.nth_run(3))}"]


def test_allow_runs_beside_and_history_limits_prune_the_oldest(cron: Cron) -> None:
    cron.create(successfulJobsHistoryLimit=1, failedJobsHistoryLimit=1)
    runs = [cron.nth_run(n) for n in (1, 2, 3)]
    cron.advance_to(runs[0])
    cron.advance_to(runs[1])
    assert len(cron.jobs()) == 2 and len(cron.cronjob()["status"]["active"]) == 2
    cron.finish(f"report-{minutes(runs[0])}")
    cron.finish(f"report-{minutes(runs[1])}")
    assert cron.jobs() == [f"report-{minutes(runs[1])}"]
    cron.advance_to(runs[2])
    cron.finish(f"report-{minutes(runs[2])}", "Failed")
    assert cron.sim.wait_idle()
    assert cron.jobs() == [f"report-{minutes(runs[1])}", f"report-{minutes(runs[2])}"]


def test_suspend_and_a_missed_starting_deadline_run_nothing(cron: Cron, kubectl: Kubectl) -> None:
    cron.create(suspend=True)
    cron.advance_to(cron.nth_run(1) + timedelta(seconds=40))
    assert cron.jobs() == []
    kubectl("patch", "cronjob", "report", "-p", '{"spec":{"suspend":false,"startingDeadlineSeconds":30}}')
    assert cron.sim.wait_idle()
    cron.advance_to(cron.nth_run(2) + timedelta(seconds=40))  # 40 s late for a 30 s deadline
    assert cron.jobs() == []
    cron.advance_to(cron.nth_run(3) + timedelta(seconds=20))
    assert cron.jobs() == [f"report-{minutes(cron.nth_run(3))}"]


def test_a_time_zone_schedules_in_local_time(cron: Cron) -> None:
    cron.create("0 9 * * *", timeZone="Asia/Tokyo")
    created = datetime.fromisoformat(cron.cronjob()["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    tokyo_nine = created.astimezone(scenario_zone("Asia/Tokyo")).replace(hour=9, minute=0, second=0)
    if tokyo_nine <= created:
        tokyo_nine += timedelta(days=1)
    cron.advance_to(tokyo_nine)
    (name,) = cron.jobs()
    assert cron.batch.job(name)["metadata"]["annotations"][SCHEDULED_TIMESTAMP].endswith("T09:00:00+09:00")


def scenario_zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def test_kubectl_create_job_from_the_cronjob_and_the_control_api_run(
    cron: Cron, kubectl: Kubectl, tmp_path: Path
) -> None:
    cron.create()
    assert (
        kubectl("create", "job", "by-hand", "--from=cronjob/report").stdout == "job.batch/by-hand created\n"
    )
    job = cron.batch.job("by-hand")
    assert job["metadata"]["annotations"] == {"cronjob.kubernetes.io/instantiate": "manual"}
    assert job["metadata"]["ownerReferences"][0]["name"] == "report"
    assert len(cron.batch.pods("by-hand")) == 1
    body = tmp_path / "run.json"
    body.write_text('{"job": "via-control"}')
    run = json.loads(
        kubectl("create", "--raw", "/sim/v1/cronjobs/default/report/run", "-f", str(body)).stdout
    )
    assert run["metadata"]["name"] == "via-control"
    assert cron.sim.wait_idle() and cron.jobs() == ["by-hand", "via-control"]
    assert "active" not in cron.cronjob()["status"]  # manual runs are not the schedule's
    events = json.loads(
        kubectl("get", "events", "--field-selector=reason=UnexpectedJob", "-o", "json").stdout
    )
    assert {e["message"] for e in events["items"]} >= {
        "Saw a job that the controller did not create or forgot: by-hand"
    }


def test_kubectl_tables_for_jobs_and_cronjobs(cron: Cron, kubectl: Kubectl) -> None:
    cron.create(timeZone="Etc/UTC")
    kubectl("create", "job", "done", "--from=cronjob/report")
    assert cron.sim.wait_idle()
    cron.finish("done")
    jobs = kubectl("get", "jobs").stdout.splitlines()
    assert jobs[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1].split()[:3] == ["done", "Complete", "1/1"]
    cronjobs = kubectl("get", "cronjobs").stdout.splitlines()
    assert cronjobs[0].split() == [
        "NAME",
        "SCHEDULE",
        "TIMEZONE",
        "SUSPEND",
        "ACTIVE",
        "LAST",
        "SCHEDULE",
        "AGE",
    ]
    assert cronjobs[1].split()[:8] == ["report", "*/5", "*", "*", "*", "*", "Etc/UTC", "False"]
    assert cronjobs[1].split()[8:10] == ["0", "<none>"]
    wide = kubectl("get", "cronjobs", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]


def test_the_scenario_s_batch_clock_speed_runs_an_hourly_cronjob_in_seconds(
    sim_factory: SimFactory, kubectl: Kubectl, tmp_path: Path
) -> None:
    lab = scenario_mod.load_scenario("lab")
    fast = lab.model_copy(update={"timing": lab.timing.model_copy(update={"batchClockSpeed": 7200.0})})
    sim = sim_factory(fast)
    config = sim.write_kubeconfig(tmp_path / "fast")
    kubectl("apply", "-f", "-", kubeconfig=config, input=CRONJOB.format(schedule="@hourly", extra=""))
    jobs = sim.store.registry.get("batch", "v1", "jobs")
    assert jobs is not None
    assert sim.wait_for(lambda: bool(sim.store.list(jobs, namespace="default").items), timeout=10)


def test_kubectl_create_cronjob_is_defaulted_as_the_apiserver_does(cron: Cron, kubectl: Kubectl) -> None:
    created = kubectl("create", "cronjob", "made", "--image=busybox", "--schedule=*/10 * * * *")
    assert created.stdout == "cronjob.batch/made created\n"
    spec = json.loads(kubectl("get", "cronjob", "made", "-o", "json").stdout)["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"]) == ("Allow", False)
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    pod_spec = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod_spec["restartPolicy"] == "OnFailure" and pod_spec["dnsPolicy"] == "ClusterFirst"


@pytest.mark.parametrize(
    ("schedule", "extra", "message"),
    [
        (
            "61 * * * *",
            "",
            'spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61',
        ),
        (
            "TZ=UTC 0 * * * *",
            "",
            'spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use '
            "timeZone field instead",
        ),
        (
            "@hourly",
            'timeZone: "Mars/Base"',
            'spec.timeZone: Invalid value: "Mars/Base": unknown time zone Mars/Base',
        ),
    ],
)
def test_invalid_cronjobs_are_422_as_the_apiserver_words_them(
    cron: Cron, kubectl: Kubectl, schedule: str, extra: str, message: str
) -> None:
    refused = kubectl("apply", "-f", "-", input=CRONJOB.format(schedule=schedule, extra=extra), check=False)
    assert refused.returncode == 1
    assert (
        refused.stderr.strip() == ('The CronJob "report" is invalid: ' + message) or message in refused.stderr
    ), refused.stderr


def test_a_job_template_must_not_restart_always(cron: Cron, kubectl: Kubectl) -> None:
    assert (
        kubectl("create", "job", "x", "--image=busybox").returncode == 0
    )  # kubectl sets restartPolicy Never
    job = CRONJOB.format(schedule="@hourly", extra="").replace(
        "restartPolicy: Never", "restartPolicy: Always"
    )
    bad = kubectl("apply", "-f", "-", input=job, check=False)
    assert (
        'spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: '
        '"OnFailure", "Never"' in bad.stderr
    )
