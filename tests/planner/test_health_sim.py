"""Health gates on the simulated lab (design §6): the lab stack, applied component by component with the
provider's write side after removing the hand-deployed plugin, passes every gate; an exporter version whose
image crash-loops, or cannot be pulled, fails its gate at once with the pod's reason, and the previous
version passes again once re-applied; a node that joins while a component is being waited for is waited
for too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_stack import LAB_HEADER

from gpuplan.modules import catalog
from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.gates import GateStatus
from gpuplan.planner.health.wait import Progress, WaitOptions, wait
from gpuplan.planner.spec import model as spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory, sim_factory  # noqa: F401  (fixture)

LAB_SPEC = LAB_HEADER
ORDER = ("driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator")
EXPORTER_REPO = "nvcr.io/nvidia/k8s/dcgm-exporter"
WAIT_SECONDS = 60.0  # a bound, never reached by a passing test


class LabStack:
    """The lab simulator, a writer for it, and the spec's objects and checks per component."""

    def __init__(self, sim: Simulator, folder: Path) -> None:
        self.sim = sim
        self.writer = KubernetesWriter(kubeconfig=str(sim.write_kubeconfig(folder / "kubeconfig")))
        self.writer.delete(ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset"))
        self.writer.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}})

    def apply(self, text: str, component: str) -> tuple[HealthCheck, ...]:
        stack = spec.parse_spec(text, filename="gpustack.yaml")
        for obj in stack.desired_objects():
            if obj.address.component == component:
                self.writer.apply(obj.manifest)
        return catalog.health_checks(stack.components(), stack.context())[component]  # type: ignore[index]

    def wait(
        self,
        checks: tuple[HealthCheck, ...],
        component: str,
        progress: list[Progress] | None = None,
        on_progress: Any = None,
    ) -> GateStatus:
        record = on_progress or (progress.append if progress is not None else None)
        return wait(
            checks,
            self.writer,
            WAIT_SECONDS,
            record,
            options=WaitOptions(component=component, expected_driver="580.105.08", poll_seconds=1),
        )


@pytest.fixture
def lab(sim_factory: SimFactory, tmp_path: Path) -> Iterator[LabStack]:  # noqa: F811
    sim = sim_factory("lab", tls=False)
    assert sim.wait_idle(30), "the lab scenario did not settle"
    stack = LabStack(sim, tmp_path)
    yield stack
    stack.writer.close()


def install(lab: LabStack, text: str = LAB_SPEC) -> None:
    """Every component in dependency order, each waited for; the external driver after GFD reports it."""
    for component in ORDER[1:]:
        status = lab.wait(lab.apply(text, component), component)
        assert status.state == "passed", f"{component}: {status.message}"


def test_the_lab_stack_passes_every_gate(lab: LabStack) -> None:
    progress: list[Progress] = []
    for component in ORDER[1:]:
        status = lab.wait(lab.apply(LAB_SPEC, component), component, progress)
        assert status.state == "passed", f"{component}: {status.message}"
        assert (status.ready, status.desired) == (1, 1)
    # the external driver is reported by GFD's label once GFD runs
    assert lab.wait(lab.apply(LAB_SPEC, "driver"), "driver").state == "passed"
    gates = {(p.component, p.gate) for p in progress}
    assert {
        ("devicePlugin", "allocatable"),
        ("gfd", "gfd-labels"),
        ("dcgmExporter", "dcgm-metrics"),
        ("validator", "validator-ready"),
        ("toolkit", "runtime-handler"),
    } <= gates


@pytest.mark.parametrize(
    "fault, reasons",
    [("CrashLoopBackOff", {"CrashLoopBackOff"}), ("ImagePullBackOff", {"ImagePullBackOff", "ErrImagePull"})],
)
def test_an_exporter_that_cannot_start_fails_its_gate_with_the_pods_reason(
    lab: LabStack, fault: str, reasons: set[str]
) -> None:
    install(lab)
    lab.sim.set_image_fault(f"{EXPORTER_REPO}:4.5.3-4.8.2-distroless", fault)
    broken = LAB_SPEC + "  dcgmExporter: {version: 4.5.3-4.8.2-distroless}\n"
    progress: list[Progress] = []
    status = lab.wait(lab.apply(broken, "dcgmExporter"), "dcgmExporter", progress)
    assert status.state == "failed" and status.reason in reasons, status.message
    assert (status.gate, status.node, status.container) == ("rollout", "lab-node", "nvidia-dcgm-exporter")
    assert status.pod is not None and status.pod.startswith("nvidia-dcgm-exporter-")
    assert status.message.startswith(f"{status.pod} on lab-node: {status.reason} (")
    assert all(p.state != "failed" or p.gate == "rollout" for p in progress)
    # the way back (what a rollback does): the previous version passes again, the broken pod being history
    restored = lab.wait(lab.apply(LAB_SPEC, "dcgmExporter"), "dcgmExporter")
    assert (restored.state, restored.ready, restored.desired) == ("passed", 1, 1), restored.message


def test_a_node_joining_during_the_wait_is_waited_for(lab: LabStack) -> None:
    for component in ORDER[1:4]:
        assert lab.wait(lab.apply(LAB_SPEC, component), component).state == "passed"
    # a slow exporter start keeps the first round "progressing", so the node joins mid-wait
    lab.sim.set_slow_image(f"{EXPORTER_REPO}:4.6.0-4.8.3-distroless", 1.0)
    joined: list[str] = []

    def add_a_node_once(progress: Progress) -> None:
        assert progress.state != "failed", progress.message
        if not joined and progress.state == "progressing":
            joined.extend(
                lab.sim.add_node(
                    {
                        "name": "gpu-2",
                        "gpu": {"model": "t4", "count": 2},
                        "driver": "580.105.08",
                        "toolkit": "1.18.1",
                    }
                )
            )

    status = lab.wait(lab.apply(LAB_SPEC, "dcgmExporter"), "dcgmExporter", on_progress=add_a_node_once)
    assert joined == ["gpu-2"]
    assert (status.state, status.ready, status.desired) == ("passed", 2, 2), status.message


def refuse_proxies(lab: LabStack, **refusals: str) -> None:
    """The lab's API server refuses the pod (and service) proxy as a real one does for good."""
    for component in ORDER[1:4]:
        assert lab.wait(lab.apply(LAB_SPEC, component), component).state == "passed"
    lab.sim.api_faults.update(proxy_refused=refusals)


def test_the_metrics_gate_reads_through_the_service_when_rbac_refuses_the_pod_proxy(lab: LabStack) -> None:
    refuse_proxies(lab, pods="forbidden")
    status = lab.wait(lab.apply(LAB_SPEC, "dcgmExporter"), "dcgmExporter")
    assert status.state == "passed", status.message
    [note] = status.notes
    assert note.startswith(
        "GPU metrics read through Service gpu-operator/nvidia-dcgm-exporter (the pod proxy: answered 403: "
        'pods "nvidia-dcgm-exporter-'
    )
    assert (
        'cannot get resource "pods/proxy"' in note and "judged on lab-node, whose exporter answered" in note
    )
    fired = lab.sim.api_faults.fired()
    assert fired["proxyRefused:pods"] >= 1 and "proxyRefused:services" not in fired


def test_an_address_the_api_server_will_not_proxy_to_fails_the_metrics_gate_at_once(lab: LabStack) -> None:
    refuse_proxies(lab, pods="address-not-allowed")
    progress: list[Progress] = []
    status = lab.wait(lab.apply(LAB_SPEC, "dcgmExporter"), "dcgmExporter", progress)
    assert (status.state, status.gate) == ("failed", "dcgm-metrics")
    assert status.message.startswith(
        "DCGM metrics cannot be read: the pod proxy: answered 400: address not allowed; the Service proxy: "
        "not tried"
    )
    assert progress[-1].elapsed < WAIT_SECONDS / 2, "the server's reason, not the timeout"
    assert "proxyRefused:services" not in lab.sim.api_faults.fired()


def test_with_every_proxy_refused_the_metrics_gate_fails_at_once_quoting_each(lab: LabStack) -> None:
    refuse_proxies(lab, pods="forbidden", services="forbidden")
    progress: list[Progress] = []
    status = lab.wait(lab.apply(LAB_SPEC, "dcgmExporter"), "dcgmExporter", progress)
    assert status.state == "failed" and not status.message.startswith("not healthy after")
    assert (
        'the Service proxy: answered 403: services "nvidia-dcgm-exporter:9400" is forbidden: User '
        '"kubernetes-admin" cannot get resource "services/proxy"'
    ) in status.message
    assert "Prometheus: the spec names none" in status.message
    assert progress[-1].elapsed < WAIT_SECONDS / 2
