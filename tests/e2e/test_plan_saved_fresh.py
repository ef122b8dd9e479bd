"""A saved plan on a live lab: the device plugin's pod restarting between `gpuplan plan --out` and `gpuplan
apply PLANFILE` moves its DaemonSet's resourceVersion (the DaemonSet controller writes status) and the plan
still applies; `kubectl set image` in between is refused as stale, naming the object and its generation.

The write guard at apply time (planner/apply/steps.py ``_guarded``), on the applied stack: status writes
racing each write of an update are re-read and written through, and a hand edit of a field gpuplan owns stops
the apply as drift naming that field and who changed it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.errors import StalePlanError
from gpuplan.planner.apply.model import ApplyOptions, ApplyResult, NullHooks
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan import build as plan_mod
from gpuplan.planner.plan import planfile
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes_write import ANY_VERSION, KubernetesWriter
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers.cache import resource_type
from gpuplan.sim.testing import Kubectl
from gpuplan.state.local import LocalFileBackend

SPEC = lab_spec(devicePlugin="{owner: external}")
HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
"""The lab's hand-deployed device plugin: a foreign object of the external device plugin, read by every
plan."""
GFD = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "gpu-feature-discovery")
EXPORTER = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:{}"
IDLE_S = 30.0


@pytest.fixture
def reader(kubeconfig: Path) -> Iterator[KubernetesWriter]:
    writer = KubernetesWriter(kubeconfig=str(kubeconfig))
    try:
        yield writer
    finally:
        writer.close()


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    return path


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def read(reader: KubernetesWriter, key: ObjectKey) -> LiveObject:
    live = reader.read(key)
    assert live is not None, f"{key.ref} is missing"
    return live


def restart_pods(kubectl: Kubectl, lab_sim: Simulator, daemonset: LiveObject) -> None:
    """Delete the DaemonSet's pods; its controller makes new ones and writes its status as they come up."""
    selector = ",".join(f"{k}={v}" for k, v in daemonset.manifest["spec"]["selector"]["matchLabels"].items())
    kubectl("delete", "pod", "-n", str(daemonset.key.namespace), "-l", selector, "--wait=false")
    assert lab_sim.wait_idle(IDLE_S), "the restarted pods did not settle"


def test_a_pod_restart_between_plan_out_and_apply_does_not_make_the_plan_stale(
    spec_file: Path,
    tmp_path: Path,
    lab_sim: Simulator,
    kubeconfig: Path,
    kubectl: Kubectl,
    reader: KubernetesWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    saved = tmp_path / "reviewed.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec_file), "--out", str(saved)) == 0
    plan = planfile.read(saved)
    assert plan.fingerprints is not None and HAND.ref in plan.fingerprints

    restart_pods(kubectl, lab_sim, read(reader, HAND))

    live = read(reader, HAND)
    assert live.resource_version != plan.resource_versions[HAND.ref], "the controller wrote the status"
    assert live.generation == plan.fingerprints[HAND.ref].generation
    snapshot = refresh.refresh(reader, load_spec(spec_file), None)
    with pytest.raises(StalePlanError):  # what the resourceVersion rule of older plans made of it
        planfile.check_fresh(plan.model_copy(update={"fingerprints": None}), None, snapshot)
    capsys.readouterr()

    assert gp(kubeconfig, "apply", "-f", str(spec_file), str(saved), "--auto-approve") == 0, (
        capsys.readouterr()
    )
    assert reader.read(GFD) is not None and reader.read(EXPORTER) is not None
    state = LocalFileBackend(tmp_path / "gpuplan.state.json").read()
    assert state is not None and f"gfd/DaemonSet/gpu-operator/{GFD.name}" in state.resources


def test_kubectl_set_image_between_plan_out_and_apply_makes_the_plan_stale(
    spec_file: Path,
    tmp_path: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    reader: KubernetesWriter,
    capsys: pytest.CaptureFixture[str],
) -> None:
    saved = tmp_path / "reviewed.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec_file), "--out", str(saved)) == 0
    container = read(reader, HAND).manifest["spec"]["template"]["spec"]["containers"][0]["name"]
    kubectl(
        "set",
        "image",
        "-n",
        "kube-system",
        f"daemonset/{HAND.name}",
        f"{container}=nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    )
    capsys.readouterr()

    assert gp(kubeconfig, "apply", "-f", str(spec_file), str(saved), "--auto-approve") == 1
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert f"Error: {saved}: Saved plan is stale" in captured.err  # the refusal names the plan file
    assert "Hint:" in captured.err
    assert f"{HAND.ref} changed after the plan was made: its spec changed (generation 1 -> 2)" in text
    assert reader.read(GFD) is None, "nothing was applied"


@pytest.mark.parametrize("edit", ["image", "drop", "other-spec"])
def test_a_saved_plan_is_applied_as_reviewed_or_refused_naming_the_file(
    spec_file: Path,
    tmp_path: Path,
    kubeconfig: Path,
    reader: KubernetesWriter,
    capsys: pytest.CaptureFixture[str],
    edit: str,
) -> None:
    """An image tag changed in the file with sed, a change dropped from it, or a -f spec that is not the one
    the plan was made from: apply refuses with one Error: line naming the plan file, and changes nothing."""
    saved = tmp_path / "reviewed.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec_file), "--out", str(saved)) == 0
    text = saved.read_text()
    if edit == "image":
        assert EXPORTER_IMAGE.format("4.6.0-4.8.3-distroless") in text
        saved.write_text(text.replace("4.6.0-4.8.3-distroless", "6.6.6-evil"))
    elif edit == "drop":
        document = json.loads(text)
        document["changes"] = [c for c in document["changes"] if c["component"] != "gfd"]
        saved.write_text(json.dumps(document))
    else:
        spec_file.write_text(SPEC.replace("owner: external", "owner: none"))
    capsys.readouterr()

    assert gp(kubeconfig, "apply", "-f", str(spec_file), str(saved), "--auto-approve") == 1
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert line.startswith(f"Error: {saved}: ") and "Hint:" in err, err
    expected = "made from another spec" if edit == "other-spec" else "modified after it was saved"
    assert expected in line, err
    assert reader.read(GFD) is None and reader.read(EXPORTER) is None, "nothing was applied"


class StatusRacingWriter(KubernetesWriter):
    """A writer whose first ``races`` applies of ``key`` are each preceded by a status write to it, as the
    DaemonSet controller makes when a pod changes between apply's read and its write."""

    def __init__(
        self, sim: Simulator, key: ObjectKey, races: list[int], lock: threading.Lock, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.sim, self.key, self.races, self.lock = sim, key, races, lock

    def apply(
        self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION, dry_run: bool = False
    ) -> LiveObject:
        if ObjectKey.of(obj) == self.key:
            with self.lock:
                racing = self.races[0] > 0
                if racing:
                    self.races[0] -= 1
            if racing:
                rt = resource_type(self.sim.store.registry, self.key.api_version, self.key.kind)
                self.sim.store.patch(
                    rt,
                    self.key.namespace,
                    self.key.name,
                    {"status": {"numberMisscheduled": self.races[0] + 1}},
                    "application/merge-patch+json",
                    manager="test-status",
                    subresource="status",
                )
        return super().apply(obj, expected_rv=expected_rv, dry_run=dry_run)


def exporter_spec(spec_file: Path, version: str) -> Path:
    path = spec_file.with_name(f"gpustack-{version}.yaml")
    path.write_text(SPEC + f"  dcgmExporter: {{version: {version}}}\n")
    return path


def test_the_write_guard_lets_racing_status_writes_through_and_stops_on_an_owned_field(
    spec_file: Path,
    tmp_path: Path,
    lab_sim: Simulator,
    kubeconfig: Path,
    kubectl: Kubectl,
    reader: KubernetesWriter,
) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec_file), "--auto-approve") == 0
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    races, lock = [2], threading.Lock()

    def racing_writer() -> KubernetesWriter:
        return StatusRacingWriter(lab_sim, EXPORTER, races, lock, kubeconfig=str(kubeconfig))

    def plan_and_apply(version: str, between: Callable[[], None] | None = None) -> ApplyResult:
        spec = load_spec(exporter_spec(spec_file, version))
        plan = plan_mod.make_plan(spec, backend.read(), refresh.refresh(reader, spec, backend.read()))
        if between is not None:
            between()
        writer = racing_writer()
        try:
            options = ApplyOptions(writer_factory=racing_writer, poll_seconds=0.5)
            return apply(plan, spec=spec, backend=backend, writer=writer, hooks=NullHooks(), options=options)
        finally:
            writer.close()

    result = plan_and_apply("4.5.2-4.8.1-distroless")
    assert result.ok, result.message
    assert races == [0], "two status writes raced the update, and it went through"
    image = read(reader, EXPORTER).manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == EXPORTER_IMAGE.format("4.5.2-4.8.1-distroless")

    def set_image() -> None:
        kubectl(
            "set",
            "image",
            "-n",
            "gpu-operator",
            f"daemonset/{EXPORTER.name}",
            f"nvidia-dcgm-exporter={EXPORTER_IMAGE.format('4.4.0-4.5.0-distroless')}",
        )

    result = plan_and_apply("4.6.0-4.8.3-distroless", between=set_image)
    assert not result.ok and result.drift
    [failure] = result.failed
    assert failure.reason == "Drift"
    assert (
        f"{EXPORTER.ref} changed since the plan: field "
        "spec.template.spec.containers[name=nvidia-dcgm-exporter].image"
    ) in failure.message
    assert (
        f"'{EXPORTER_IMAGE.format('4.5.2-4.8.1-distroless')}' -> "
        f"'{EXPORTER_IMAGE.format('4.4.0-4.5.0-distroless')}' (changed by kubectl-set)"
    ) in failure.message
    image = read(reader, EXPORTER).manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == EXPORTER_IMAGE.format("4.4.0-4.5.0-distroless"), "the hand edit was not overwritten"
