"""What the Job and CronJob controller tests share: pod phases written through the status subresource as a
kubelet would, and short looks at Jobs, pods and conditions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.cluster import Simulator

T0 = datetime(2026, 3, 2, 10, 7, 30, tzinfo=UTC)


UNSCHEDULED = "none-in-this-cluster"


class Batch:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        reg = sim.store.registry
        self.pods_rt = reg.get("", "v1", "pods")
        self.jobs_rt = reg.get("batch", "v1", "jobs")
        self.cronjobs_rt = reg.get("batch", "v1", "cronjobs")

    def create_job(self, name: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                **spec,
                "template": {
                    "metadata": {"labels": {"app": name}},
                    # a scheduler of its own name: the default scheduler leaves the pods unbound, so no
                    # kubelet runs them and the tests write their phases as one would
                    "spec": {
                        "restartPolicy": "Never",
                        "schedulerName": UNSCHEDULED,
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
            },
        }
        job = self.sim.store.create(self.jobs_rt, body, namespace="default", manager="test")
        assert self.sim.wait_idle()
        return job

    def job(self, name: str) -> dict[str, Any]:
        return self.sim.store.get(self.jobs_rt, "default", name)

    def pods(self, job: str) -> list[dict[str, Any]]:
        listed = self.sim.store.list(self.pods_rt, namespace="default", label_selector=f"job-name={job}")
        return sorted(listed.items, key=lambda p: p["metadata"]["name"])

    def set_phase(self, pod: dict[str, Any], phase: str, *, ready: bool = False) -> None:
        """What a kubelet reports: the phase, and the Ready condition."""
        current = self.sim.store.get(self.pods_rt, "default", pod["metadata"]["name"])
        conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
        current["status"] = {**current.get("status", {}), "phase": phase, "conditions": conditions}
        self.sim.store.update(
            self.pods_rt,
            current,
            namespace="default",
            name=pod["metadata"]["name"],
            manager="kubelet",
            subresource="status",
        )
        assert self.sim.wait_idle()

    def conditions(self, name: str) -> list[tuple[str, str]]:
        return [(c["type"], c["reason"]) for c in self.job(name)["status"].get("conditions", [])]
