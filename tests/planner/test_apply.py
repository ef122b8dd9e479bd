"""The apply walker against the simulated lab: apply from nothing, in-place updates that wait for the rollout,
gate failures (crash loop, image pull) rolled back to the exact pre-apply objects, a failure in the middle of
a multi-component apply, --no-rollback taints, drift between plan and apply, and the kube-system plugin
adopted with `gpuplan import` replaced delete-first and recreated by rollback."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from lab_stack import LAB_SPEC

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions, ApplyResult, Failure
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.diff import fields as diff
from gpuplan.planner.health import wait as health_wait
from gpuplan.planner.observe import refresh
from gpuplan.planner.observe.adopt import record_imported
from gpuplan.planner.plan import build as plan_mod
from gpuplan.planner.plan.build import Plan
from gpuplan.planner.spec import model as spec_mod
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory
from gpuplan.state.backend import MemoryBackend
from gpuplan.state.model import StateFile

SPEC = LAB_SPEC  # the demo's whole stack
HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
EXPORTER = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
PLUGIN = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
GFD = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "gpu-feature-discovery")
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:{}"


@dataclass
class Recorded:
    events: list[ApplyEvent] = field(default_factory=list)

    def on_event(self, event: ApplyEvent) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[ApplyEvent]:
        return [event for event in self.events if event.type == kind]


@dataclass
class Lab:
    sim: Simulator
    writer: KubernetesWriter
    backend: MemoryBackend
    kubeconfig: str

    def plan(self, spec: Spec) -> Plan:
        snapshot = refresh.refresh(self.writer, spec, self.backend.read())
        return plan_mod.make_plan(spec, self.backend.read(), snapshot)

    def apply(self, spec: Spec, *, plan: Plan | None = None, **options: Any) -> tuple[ApplyResult, Recorded]:
        hooks = Recorded()
        settings = ApplyOptions(
            writer_factory=lambda: KubernetesWriter(kubeconfig=self.kubeconfig), poll_seconds=0.5, **options
        )
        result = apply(
            plan or self.plan(spec),
            spec=spec,
            backend=self.backend,
            writer=self.writer,
            hooks=hooks,
            options=settings,
        )
        return result, hooks

    def owned(self, key: ObjectKey, template: dict[str, Any]) -> dict[str, Any]:
        live = self.writer.read(key)
        assert live is not None, f"{key.ref} is missing"
        return diff.owned_view(live.manifest, template)

    def scrape_exporter(self) -> str:
        pods = self.writer.list_pods(namespace="gpu-operator", label_selector="app=nvidia-dcgm-exporter")
        [pod] = [p for p in pods if not p.metadata.get("deletionTimestamp")]
        return self.writer.proxy_get("gpu-operator", pod.key.name, 9400, "/metrics").decode()


def lab_spec(**versions: str) -> Spec:
    text = SPEC
    defaults = {"devicePlugin": "v0.20.1", "gfd": "v0.20.1", "dcgmExporter": "4.6.0-4.8.3-distroless"}
    for component, version in versions.items():
        text = text.replace(
            f"  {component}:\n    version: {defaults[component]}", f"  {component}:\n    version: {version}"
        )
    return spec_mod.parse_spec(text, filename="gpustack.yaml")


@pytest.fixture
def lab(sim_factory: SimFactory, tmp_path: Any) -> Iterator[Lab]:
    sim = sim_factory("lab")
    assert sim.wait_idle(30)
    kubeconfig = str(sim.write_kubeconfig(tmp_path / "kubeconfig"))
    writer = KubernetesWriter(kubeconfig=kubeconfig)
    yield Lab(sim, writer, MemoryBackend(), kubeconfig)
    writer.close()


@pytest.fixture
def applied(lab: Lab) -> Lab:
    """The lab with the conflict resolved by deleting the hand-made plugin, then applied."""
    lab.writer.delete(HAND)
    result, _ = lab.apply(lab_spec())
    assert result.ok, result.message
    return lab


def test_apply_from_nothing_brings_every_component_to_healthy(lab: Lab) -> None:
    lab.writer.delete(HAND)
    result, hooks = lab.apply(lab_spec())

    assert result.ok and not result.failed, result.message
    assert len(result.changed) == 28 and "toolkit/RuntimeClass/nvidia" in result.changed
    assert "validator/CustomResourceDefinition/gpustacks.gpuplan.io" in result.changed
    passed = {e.component for e in hooks.of("progress") if e.state == "passed"}
    # the external driver's version is verified once GFD reports it (planner.apply.driver_check)
    assert passed == {"toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator", "driver"}
    assert [e.type for e in hooks.events][:3] == ["apply_start", "note", "note"]
    # the node labels first (nothing needs to run before NFD's label gives gpu.present), then the namespace
    assert hooks.events[1].message == "label 1 node nvidia.com/gpu.present=true"
    assert "created namespace gpu-operator" in hooks.events[2].message
    assert hooks.events[-1].type == "summary" and hooks.events[-1].state == "ok"
    state = lab.backend.read()
    assert state is not None and not state.journal and state.serial == result.serial
    assert len(state.resources) == 28 and [g.serial for g in state.history] == [state.serial]
    assert "DCGM_FI_DEV_GPU_TEMP" in lab.scrape_exporter()
    node = lab.writer.list_nodes().items[0].manifest
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
    again = lab.plan(lab_spec())
    assert not again.has_changes and not again.drift


def test_within_a_component_rbac_goes_before_the_workload_and_the_service_after(lab: Lab) -> None:
    lab.writer.delete(HAND)
    _, hooks = lab.apply(lab_spec())
    exporter = [e.address for e in hooks.of("change_start") if e.component == "dcgmExporter"]
    assert [a.split("/")[1] for a in exporter] == [
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "DaemonSet",
        "Service",
    ]
    order = [e.component for e in hooks.of("change_start")]
    # the toolkit writes first (its RuntimeClass, which the operands' pods name); the others' objects are
    # written side by side, their pods ordering themselves on each node
    made_first = max(i for i, c in enumerate(order) if c == "toolkit")
    assert all(order.index(c) > made_first for c in ("devicePlugin", "gfd", "dcgmExporter", "validator"))


def test_device_plugin_version_change_updates_in_place_and_waits_for_the_rollout(applied: Lab) -> None:
    before = applied.writer.read(PLUGIN)
    assert before is not None
    result, hooks = applied.apply(lab_spec(devicePlugin="v0.20.0"))

    assert result.ok, result.message
    assert result.changed == ["devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"]
    [start] = hooks.of("change_start")
    assert start.action == "update"
    after = applied.writer.read(PLUGIN)
    assert after is not None and after.uid == before.uid  # in place, not recreated
    assert after.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.20.0")
    gates = [e for e in hooks.of("progress") if e.component == "devicePlugin"]
    assert gates[-1].state == "passed"
    status = after.manifest["status"]
    assert (
        status["updatedNumberScheduled"] == status["numberAvailable"] == status["desiredNumberScheduled"] == 1
    )
    assert not applied.plan(lab_spec(devicePlugin="v0.20.0")).has_changes


@pytest.mark.parametrize("fault", ["CrashLoopBackOff", "ImagePullBackOff"])
def test_a_failing_exporter_image_fails_its_gate_and_is_rolled_back_exactly(applied: Lab, fault: str) -> None:
    broken = "4.5.2-4.8.1-distroless"
    applied.sim.set_image_fault(EXPORTER_IMAGE.format(broken), fault)
    desired = next(
        o.manifest
        for o in lab_spec().desired_objects()
        if o.address.name == EXPORTER.name and o.address.kind == "DaemonSet"
    )
    pre_live = applied.owned(EXPORTER, dict(desired))
    pre_state = applied.backend.read()
    assert pre_state is not None

    result, hooks = applied.apply(lab_spec(dcgmExporter=broken))

    assert not result.ok and result.rolled_back == [
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter"
    ]
    [failure] = result.failed
    assert failure.reason == fault and failure.gate == "rollout" and failure.node == "lab-node"
    assert failure.pod and failure.pod.startswith("nvidia-dcgm-exporter-")
    assert fault in result.message and "Rolled back" in result.message
    assert [e.type for e in hooks.events if e.type.startswith("rollback")] == [
        "rollback_start",
        "rollback_complete",
    ]
    assert applied.owned(EXPORTER, dict(desired)) == pre_live
    assert "DCGM_FI_DEV_GPU_TEMP" in applied.scrape_exporter()
    state = applied.backend.read()
    assert state is not None and not state.journal and state.serial > pre_state.serial
    assert {a: r.owned for a, r in state.resources.items()} == {
        a: r.owned for a, r in pre_state.resources.items()
    }
    assert not applied.plan(lab_spec()).has_changes


def test_a_failure_in_the_middle_of_a_multi_component_apply_undoes_the_components_before_it(
    applied: Lab,
) -> None:
    broken = "4.5.2-4.8.1-distroless"
    applied.sim.set_image_fault(EXPORTER_IMAGE.format(broken), "CrashLoopBackOff")
    spec = lab_spec(devicePlugin="v0.20.0", gfd="v0.20.0", dcgmExporter=broken)

    result, hooks = applied.apply(spec)

    assert not result.ok
    assert set(result.changed) == {
        "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
    }
    completed = [e.address for e in hooks.of("change_complete")]
    assert result.rolled_back == completed[::-1]  # in reverse order of completion
    for key in (PLUGIN, GFD):
        live = applied.writer.read(key)
        assert live is not None
        assert live.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.20.1")
    restored = {
        e.component
        for e in hooks.events[hooks.events.index(hooks.of("rollback_start")[0]) :]
        if e.type == "progress" and e.state == "passed"
    }
    assert restored == {"devicePlugin", "gfd", "dcgmExporter"}
    assert not applied.plan(lab_spec()).has_changes


def test_no_rollback_leaves_the_change_and_taints_it_so_the_next_plan_replaces_it(applied: Lab) -> None:
    broken = "4.5.2-4.8.1-distroless"
    applied.sim.set_image_fault(EXPORTER_IMAGE.format(broken), "CrashLoopBackOff")
    result, hooks = applied.apply(lab_spec(dcgmExporter=broken), rollback=False)

    assert not result.ok and result.rolled_back == [] and not hooks.of("rollback_start")
    assert "Not rolled back" in result.message and "tainted" in result.message
    state = applied.backend.read()
    assert state is not None
    assert state.resources["dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter"].status == "tainted"
    live = applied.writer.read(EXPORTER)
    assert live is not None and broken in live.manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    [change] = [c for c in applied.plan(lab_spec()).changes if c.action != "no-op"]
    assert change.action == "replace" and change.reason == "REPLACE_BECAUSE_TAINTED"

    result, hooks = applied.apply(lab_spec())  # the replace: delete, wait until gone, create, gate
    assert result.ok, result.message
    replaced = applied.writer.read(EXPORTER)
    assert replaced is not None and replaced.uid != live.uid
    assert [e.action for e in hooks.of("change_complete")] == ["replace"]
    assert not applied.plan(lab_spec()).has_changes


def test_an_object_changed_between_plan_and_apply_stops_the_apply_as_drift(
    applied: Lab, kubectl: Kubectl
) -> None:
    spec = lab_spec(devicePlugin="v0.20.0", dcgmExporter="4.5.2-4.8.1-distroless")
    plan = applied.plan(spec)
    patch = '[{{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "{}"}}]'.format(
        EXPORTER_IMAGE.format("4.4.0-4.5.0-distroless")
    )
    kubectl(
        "patch",
        "daemonset",
        "-n",
        "gpu-operator",
        EXPORTER.name,
        "--type",
        "json",
        "-p",
        patch,
        kubeconfig=applied.kubeconfig,
    )

    result, _ = applied.apply(spec, plan=plan)

    assert not result.ok and result.drift
    [failure] = result.causes  # the device plugin's gate, judged meanwhile, may have been stopped by it
    assert failure.reason == "Drift" and "kubectl-patch" in failure.message
    assert result.rolled_back == ["devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"]
    live = applied.writer.read(PLUGIN)
    assert live is not None and live.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        ":v0.20.1"
    )


def test_a_status_only_move_since_the_plan_is_not_drift(applied: Lab) -> None:
    spec = lab_spec(devicePlugin="v0.20.0")
    plan = applied.plan(spec)
    rv = plan.resource_versions[PLUGIN.ref]
    stale = plan.model_copy(
        update={"resource_versions": {**plan.resource_versions, PLUGIN.ref: str(int(rv) - 1)}}
    )
    result, _ = applied.apply(spec, plan=stale)
    assert result.ok, result.message


def test_the_adopted_kube_system_plugin_is_deleted_first_and_rollback_recreates_it(lab: Lab) -> None:
    hand = lab.writer.read(HAND)
    assert hand is not None
    record = record_imported("devicePlugin", hand, serial=1)
    lab.backend.write(StateFile.new().with_record(record).next_serial())
    lab.sim.set_image_fault("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "CrashLoopBackOff")
    spec = lab_spec(devicePlugin="v0.20.0")
    [replace] = [c for c in lab.plan(spec).changes if c.action == "replace"]
    assert replace.replaces == HAND.ref

    result, _ = lab.apply(spec)

    assert not result.ok and result.failed[0].reason == "CrashLoopBackOff"
    recreated = lab.writer.read(HAND)
    assert recreated is not None and recreated.uid != hand.uid
    assert lab.writer.read(PLUGIN) is None
    state = lab.backend.read()
    assert state is not None and set(state.resources) == {record.address}
    assert state.resources[record.address].uid == recreated.uid
    node = lab.writer.list_nodes().items[0].manifest
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

    lab.sim.set_image_fault("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", None)
    result, hooks = lab.apply(spec)
    assert result.ok, result.message
    assert lab.writer.read(HAND) is None and lab.writer.read(PLUGIN) is not None
    state = lab.backend.read()
    assert state is not None and record.address not in state.resources


def test_ten_percent_api_errors_and_429s_still_converge_without_duplicates(lab: Lab) -> None:
    lab.writer.delete(HAND)
    lab.sim.set_api_faults(error_rate=0.1, codes=(500, 503, 429), retry_after_seconds=0, seed=7)
    result, _ = lab.apply(lab_spec())
    lab.sim.clear_api_faults()

    assert result.ok, result.message
    for kind in ("DaemonSet", "ServiceAccount", "Service"):
        api_version = "apps/v1" if kind == "DaemonSet" else "v1"
        names = [o.key.name for o in lab.writer.list_objects(api_version, kind, namespace="gpu-operator")]
        assert len(names) == len(set(names))
    daemonsets = lab.writer.list_objects("apps/v1", "DaemonSet", namespace="gpu-operator")
    assert len(daemonsets) == 4
    assert not lab.plan(lab_spec()).has_changes


def test_with_parallelism_1_the_walk_is_serial_every_change_first_then_the_gates_in_order(lab: Lab) -> None:
    lab.writer.delete(HAND)
    result, hooks = lab.apply(lab_spec(), parallelism=1)
    assert result.ok, result.message
    steps = [
        (e.type == "progress", e.component) for e in hooks.events if e.type in ("change_start", "progress")
    ]
    runs = [s for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s]
    assert len(runs) == len(set(runs)), f"tasks interleaved: {runs}"
    chain = ["toolkit", "devicePlugin", "gfd", "dcgmExporter"]
    # the driver's version is verified after the gate of GFD, the first to report it
    assert runs == [(False, c) for c in [*chain, "validator"]] + [
        (True, c) for c in [*chain[:3], "driver", chain[3], "validator"]
    ]


def test_a_hand_made_runtime_class_is_a_conflict_and_once_imported_it_is_managed(lab: Lab) -> None:
    lab.writer.delete(HAND)
    lab.writer.create(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "nvidia"},
            "handler": "nvidia",
        }
    )
    plan = lab.plan(lab_spec())
    [conflict] = plan.conflicts
    assert conflict.object == "node.k8s.io/v1/RuntimeClass/nvidia" and not plan.applicable
    assert (
        conflict.resolutions[0].command
        == "gpuplan import -f gpustack.yaml toolkit/RuntimeClass/nvidia RuntimeClass/nvidia"
    )
    hand_made = lab.writer.read(ObjectKey("node.k8s.io/v1", "RuntimeClass", None, "nvidia"))
    assert hand_made is not None
    lab.backend.write(
        StateFile.new().with_record(record_imported("toolkit", hand_made, serial=1)).next_serial()
    )

    result, _ = lab.apply(lab_spec())

    assert result.ok, result.message
    runtime_class = lab.writer.read(ObjectKey("node.k8s.io/v1", "RuntimeClass", None, "nvidia"))
    assert runtime_class is not None and runtime_class.uid == hand_made.uid  # updated in place, not recreated
    assert runtime_class.labels.get("gpuplan.io/stack") == "lab"
    assert not lab.plan(lab_spec()).has_changes


def test_a_state_with_an_interrupted_journal_must_be_reconciled_before_the_walk(lab: Lab) -> None:
    from gpuplan.errors import StateError
    from gpuplan.state.model import JournalEntry

    plan = lab.plan(lab_spec())
    entry = JournalEntry(
        address="gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        action="create",
        started_at="2026-11-29T18:00:00Z",
    )
    lab.backend.write(StateFile.new().with_journal_entry(entry).next_serial())
    with pytest.raises(StateError, match="journal of an interrupted apply"):
        lab.apply(lab_spec(), plan=plan)
    assert lab.writer.read(ObjectKey("v1", "Namespace", None, "gpu-operator")) is None  # nothing was touched


def test_an_external_drivers_version_is_verified_after_gfd_labels_the_nodes(lab: Lab) -> None:
    lab.writer.delete(HAND)
    result, hooks = lab.apply(lab_spec())
    assert result.ok, result.message
    events = hooks.events
    verified = next(
        i
        for i, e in enumerate(events)
        if e.type == "progress"
        and e.state == "passed"
        and (e.component, e.gate) == ("driver", "driver-version")
    )
    # The version can only be verified once GFD runs and labels the node: after GFD's DaemonSet exists.
    # (Components run in parallel, so another component's gate may pass first and trigger the check.)
    gfd_daemonset = "gfd/DaemonSet/gpu-operator/gpu-feature-discovery"
    gfd_created = next(
        i for i, e in enumerate(events) if e.type == "change_complete" and e.address == gfd_daemonset
    )
    assert verified > gfd_created


def test_a_wrong_driver_version_that_only_dcgm_reports_fails_the_apply_and_rolls_back(lab: Lab) -> None:
    """No GFD: the exporter's DCGM_FI_DRIVER_VERSION is the source; the spec's version is not the host's."""
    lab.writer.delete(HAND)
    text = SPEC.replace('version: "580.105.08"', 'version: "580.65.06"\n    healthTimeoutSeconds: 2').replace(
        "  gfd:\n    version: v0.20.1", "  gfd:\n    owner: none"
    )
    spec = spec_mod.parse_spec(text, filename="gpustack.yaml")
    result, hooks = lab.apply(spec)
    assert not result.ok
    # a gate judged meanwhile (the validator's) may be stopped by the failure: it is not a cause
    [failure] = [f for f in result.failed if f.reason != "Stopped"]
    assert (failure.component, failure.gate, failure.node) == ("driver", "driver-version", "lab-node")
    assert "driver 580.105.08, expected 580.65.06" in failure.message
    assert result.rollback_complete and lab.writer.read(EXPORTER) is None and lab.writer.read(HAND) is None
    state = lab.backend.read()
    assert state is not None and not state.resources and not state.journal


def test_a_write_that_keeps_failing_with_500_rolls_the_apply_back(lab: Lab) -> None:
    """The writer's retries are exhausted on the exporter's DaemonSet: an API error retries cannot cure,
    so everything this apply created is undone and the state says so."""
    lab.writer.delete(HAND)
    sim = lab.sim

    class FailingExporterWrites(KubernetesWriter):
        def create(self, obj: Any, *, dry_run: bool = False) -> Any:
            if obj["kind"] != "DaemonSet" or obj["metadata"]["name"] != EXPORTER.name:
                return super().create(obj, dry_run=dry_run)
            sim.set_api_faults(error_rate=1.0, codes=(500,), retry_after_seconds=0)
            try:
                return super().create(obj, dry_run=dry_run)
            finally:
                sim.clear_api_faults()

    writer = FailingExporterWrites(kubeconfig=lab.kubeconfig)
    try:
        hooks = Recorded()
        options = ApplyOptions(
            writer_factory=lambda: FailingExporterWrites(kubeconfig=lab.kubeconfig),
            poll_seconds=0.5,
            parallelism=1,
        )
        result = apply(
            lab.plan(lab_spec()),
            spec=lab_spec(),
            backend=lab.backend,
            writer=writer,
            hooks=hooks,
            options=options,
        )
    finally:
        writer.close()
    assert not result.ok and result.rollback_complete, result.message
    [failure] = [f for f in result.failed if f.reason != "Stopped"]
    assert (failure.reason, failure.component) == ("ApiError", "dcgmExporter")
    assert hooks.of("rollback_start") and result.rolled_back
    for key in (EXPORTER, PLUGIN, GFD):
        assert lab.writer.read(key) is None, f"{key.ref} was left behind"
    state = lab.backend.read()
    assert state is not None and not state.resources and not state.pending_journal()


def test_a_failure_names_its_pod_and_node_once() -> None:
    said = Failure(
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        "pod nvidia-dcgm-exporter-abc on lab-node: CrashLoopBackOff (back-off 10s)",
        "dcgmExporter",
        "CrashLoopBackOff",
        "lab-node",
        "nvidia-dcgm-exporter-abc",
        "rollout",
    )
    assert said.describe() == (
        "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter at the rollout gate: "
        "pod nvidia-dcgm-exporter-abc on lab-node: CrashLoopBackOff (back-off 10s)"
    )
    unsaid = Failure(
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        "label nvidia.com/gpu.product missing",
        "gfd",
        "LabelMissing",
        "lab-node",
        "gpu-feature-discovery-x",
        None,
    )
    assert unsaid.describe().endswith(
        "label nvidia.com/gpu.product missing [pod gpu-feature-discovery-x, node lab-node]"
    )


# -- parallelism, deletes through the walker, spec-set gate timeouts (brief s2/H)
# -----------------------------

GFD_SLOW_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"  # GFD ships in the device plugin's image
NO_GFD_NO_EXPORTER = SPEC.replace("  gfd:\n    version: v0.20.1\n", "  gfd:\n    owner: none\n").replace(
    "  dcgmExporter:\n    version: 4.6.0-4.8.3-distroless\n", "  dcgmExporter:\n    owner: none\n"
)


def _first(events: list[ApplyEvent], kind: str, component: str, state: str | None = None) -> int:
    return next(
        i
        for i, e in enumerate(events)
        if e.type == kind and e.component == component and (state is None or e.state == state)
    )


@pytest.mark.parametrize("parallelism", [1, 2])
def test_the_validator_gate_overlaps_a_slow_gfd_rollout_only_with_parallelism_above_1(
    lab: Lab, parallelism: int
) -> None:
    """The validator depends on driver, toolkit and devicePlugin, not on gfd: the device plugin's changes are
    made before its gate, and once the device plugin passes both gates are ready; with two workers the
    validator's is judged while GFD's pods are still starting."""
    lab.writer.delete(HAND)
    lab.sim.set_slow_image(GFD_SLOW_IMAGE, 5)  # only GFD uses v0.20.0: the device plugin stays at v0.20.1
    result, hooks = lab.apply(lab_spec(gfd="v0.20.0"), parallelism=parallelism)

    assert result.ok, result.message
    events = hooks.events
    gfd_passed = _first(events, "progress", "gfd", "passed")
    validator_gate = _first(events, "progress", "validator")
    # the device plugin's gate follows its own changes; with two workers the other components' changes
    # (now more objects: the operator's Roles and entrypoint ConfigMap) may still be under way
    last_change = max(
        i for i, e in enumerate(events) if e.type == "change_complete" and e.component == "devicePlugin"
    )
    assert last_change < _first(events, "progress", "devicePlugin", "passed")
    assert _first(events, "progress", "devicePlugin", "passed") < validator_gate
    assert gfd_passed < _first(events, "progress", "dcgmExporter")  # its dependency is still respected
    if parallelism == 2:
        assert validator_gate < gfd_passed
    else:
        assert validator_gate > gfd_passed


def test_deletes_go_dependents_first_and_each_component_in_reverse_kind_order(applied: Lab) -> None:
    spec = spec_mod.parse_spec(NO_GFD_NO_EXPORTER, filename="gpustack.yaml")
    plan = applied.plan(spec)
    deletes = {c.address for c in plan.changes if c.action == "delete"}
    assert {a.split("/")[0] for a in deletes} == {"gfd", "dcgmExporter"} and len(deletes) == 13

    result, hooks = applied.apply(spec, plan=plan)

    assert result.ok, result.message
    starts = hooks.of("change_start")
    assert {e.action for e in starts} == {"delete"} and {e.address for e in starts} == deletes
    assert [(e.component, e.address.split("/")[1]) for e in starts] == [
        ("dcgmExporter", "Service"),
        ("dcgmExporter", "DaemonSet"),
        ("dcgmExporter", "ClusterRoleBinding"),
        ("dcgmExporter", "RoleBinding"),
        ("dcgmExporter", "ClusterRole"),
        ("dcgmExporter", "Role"),
        ("dcgmExporter", "ServiceAccount"),
        ("gfd", "DaemonSet"),
        ("gfd", "ClusterRoleBinding"),
        ("gfd", "RoleBinding"),
        ("gfd", "ClusterRole"),
        ("gfd", "Role"),
        ("gfd", "ServiceAccount"),
    ]
    assert applied.writer.read(EXPORTER) is None and applied.writer.read(GFD) is None
    state = applied.backend.read()
    assert state is not None and not deletes & set(state.resources) and not state.journal
    assert not applied.plan(spec).has_changes


def test_a_failed_delete_rolls_back_and_recreates_the_objects_already_deleted(applied: Lab) -> None:
    """GFD's last delete (its ServiceAccount) keeps failing with 500: the exporter's three objects and GFD's
    five others, deleted before it, come back with the owned fields they had, and the state records them."""
    spec = spec_mod.parse_spec(NO_GFD_NO_EXPORTER, filename="gpustack.yaml")
    plan = applied.plan(spec)
    deleted = [c for c in plan.changes if c.action == "delete"]
    before = {c.address: c.before for c in deleted}
    pre_owned = {address: applied.owned(ObjectKey.of(body), dict(body)) for address, body in before.items()}
    pre_state = applied.backend.read()
    assert pre_state is not None
    sim = applied.sim

    class FailingGfdAccountDelete(KubernetesWriter):
        def delete(self, key: ObjectKey, **kwargs: Any) -> Any:
            if (key.kind, key.name) != ("ServiceAccount", "nvidia-gpu-feature-discovery"):
                return super().delete(key, **kwargs)
            sim.set_api_faults(error_rate=1.0, codes=(500,), retry_after_seconds=0)
            try:
                return super().delete(key, **kwargs)
            finally:
                sim.clear_api_faults()

    hooks = Recorded()
    options = ApplyOptions(
        writer_factory=lambda: FailingGfdAccountDelete(kubeconfig=applied.kubeconfig), poll_seconds=0.5
    )
    result = apply(
        plan, spec=spec, backend=applied.backend, writer=applied.writer, hooks=hooks, options=options
    )

    assert not result.ok and result.rollback_complete, result.message
    [failure] = result.failed
    assert (failure.reason, failure.component) == ("ApiError", "gfd")
    assert len(result.changed) == 12 and set(result.rolled_back) == set(result.changed)
    for address, body in before.items():
        assert applied.owned(ObjectKey.of(body), dict(body)) == pre_owned[address], f"{address} not as before"
    state = applied.backend.read()
    assert state is not None and not state.journal
    assert {a: r.owned for a, r in state.resources.items()} == {
        a: r.owned for a, r in pre_state.resources.items()
    }
    restored = {
        e.component
        for e in hooks.events[hooks.events.index(hooks.of("rollback_start")[0]) :]
        if e.type == "progress" and e.state == "passed"
    }
    assert {"gfd", "dcgmExporter"} <= restored
    assert "DCGM_FI_DEV_GPU_TEMP" in applied.scrape_exporter()
    assert not applied.plan(lab_spec()).has_changes


def test_a_spec_set_health_timeout_fails_the_exporter_gate_at_that_limit(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dcgmExporter: {healthTimeoutSeconds: 3}`` with pods that take a minute to start: the gate gives up
    after the spec's 3 s, not the default 300 s, and the walker handed the wait checks carrying that limit."""
    lab.writer.delete(HAND)
    lab.sim.set_slow_image(EXPORTER_IMAGE.format("4.6.0-4.8.3-distroless"), 60)
    waits: list[tuple[str, tuple[HealthCheck, ...], float | None]] = []
    real_wait = health_wait.wait

    def recording_wait(
        checks: Any,
        provider: Any,
        timeout: float | None = None,
        on_progress: Any = None,
        *,
        options: health_wait.WaitOptions | None = None,
    ) -> Any:
        waits.append((options.component if options else "", tuple(checks), timeout))
        return real_wait(checks, provider, timeout, on_progress, options=options)

    monkeypatch.setattr(health_wait, "wait", recording_wait)
    text = SPEC.replace(
        "    version: 4.6.0-4.8.3-distroless\n",
        "    version: 4.6.0-4.8.3-distroless\n    healthTimeoutSeconds: 3\n",
    )
    result, _ = lab.apply(spec_mod.parse_spec(text, filename="gpustack.yaml"))

    assert not result.ok and result.rollback_complete
    [failure] = result.failed
    assert failure.component == "dcgmExporter" and failure.message.startswith("not healthy after 3s: ")
    assert "not healthy after 3s" in result.message
    [(checks, timeout)] = [
        (checks, timeout) for component, checks, timeout in waits if component == "dcgmExporter"
    ]
    assert timeout is None and checks and {check.params["timeoutSeconds"] for check in checks} == {3}
    gfd_limits = {check.params["timeoutSeconds"] for c, checks, _ in waits if c == "gfd" for check in checks}
    assert gfd_limits == {300}  # the limit is the exporter's own, not the stack's
    assert lab.writer.read(EXPORTER) is None


SERVER_METADATA = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "annotations")


def stack_objects(lab: Lab) -> dict[str, dict[str, Any]]:
    """Every object of the stack as the API server has it, less what only the server writes (versions,
    managedFields, status, the controller's annotations): what a rollback must restore exactly."""
    state = lab.backend.read()
    assert state is not None
    found: dict[str, dict[str, Any]] = {}
    for address, record in state.resources.items():
        live = lab.writer.read(ObjectKey(record.api_version, record.kind, record.namespace, record.name))
        assert live is not None, address
        manifest = {key: value for key, value in live.manifest.items() if key != "status"}
        manifest["metadata"] = {k: v for k, v in manifest["metadata"].items() if k not in SERVER_METADATA}
        found[address] = manifest
    return found


def test_rollback_restores_every_field_of_every_component_exactly(applied: Lab) -> None:
    """A failed apply that added an env variable to the device plugin, changed GFD's version and broke the
    exporter: after its rollback every stack object is field for field what it was (the same uid, no field
    added, none lost), and so is every state record."""
    broken = "4.5.2-4.8.1-distroless"
    applied.sim.set_image_fault(EXPORTER_IMAGE.format(broken), "CrashLoopBackOff")
    before, records = stack_objects(applied), applied.backend.read()
    text = SPEC.replace(
        "  devicePlugin:\n    version: v0.20.1\n",
        "  devicePlugin:\n    version: v0.20.1\n    env:\n"
        "      - {name: DEVICE_LIST_STRATEGY, value: cdi-annotations}\n"
        "      - {name: PASS_DEVICE_SPECS, value: 'true'}\n",
    ).replace("  gfd:\n    version: v0.20.1", "  gfd:\n    version: v0.20.0")
    failing = spec_mod.parse_spec(text.replace("4.6.0-4.8.3-distroless", broken), filename="gpustack.yaml")
    changed = {c.address for c in applied.plan(failing).changes if c.action != "no-op"}
    assert len(changed) == 3, changed

    result, _ = applied.apply(failing)

    assert not result.ok and set(result.rolled_back) == changed, result.message
    after = stack_objects(applied)
    for address in before:
        assert after[address] == before[address], address
    restored = applied.backend.read()
    assert restored is not None and records is not None
    assert {a: r.owned for a, r in restored.resources.items()} == {
        a: r.owned for a, r in records.resources.items()
    }
