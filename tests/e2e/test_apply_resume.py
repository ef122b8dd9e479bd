"""The next `gpuplan apply` after one killed (SIGKILL) half-way finishes or undoes what the killed one did.

Killed during a component's health wait (its mutation landed, its journal entry done, its gate never ran):
the next apply runs that gate first; healthy, it clears the journal and goes on ("No changes"); crash-looping,
it rolls the interrupted change back from the entry's before-object, exits 1 saying so, and leaves the journal
empty.

Killed between a component's RBAC and its DaemonSet (a half-made component, GFD here): the next apply undoes
the RBAC first, so the component is created whole by one apply; when that apply's gate fails, its rollback
leaves none of the component in the cluster or the state, and when it succeeds the plan after it has no
changes. A kill during that undo leaves a state the apply after it converges from.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apply_process import (
    LAB_SPEC,
    ApplyProcess,
    assert_everything_accounted_for,
    converge,
    gpuplan,
    stack_objects,
    state_of,
)

from gpuplan.planner.apply.steps import kind_rank
from gpuplan.planner.plan.build import spec_digest
from gpuplan.planner.spec.model import load_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator

SPEC = (
    LAB_SPEC
    + """\
  devicePlugin:
    version: {plugin}
"""
)
PLUGIN = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
PLUGIN_ADDRESS = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
OLD, NEW = "v0.20.1", "v0.17.4"  # GFD stays on OLD, so a fault on the NEW image touches the plugin only

GFD_SPEC = (
    LAB_SPEC
    + """\
  gfd:
    owner: {owner}
    version: v0.17.4
"""
)  # GFD on its own tag (the device plugin shares its image), so a fault on that image touches GFD only
KILL_AT = "GPUPLAN_TEST_KILL_AT"


def plugin_image(writer: KubernetesWriter) -> str:
    live = writer.read(PLUGIN)
    assert live is not None
    image: str = live.manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


@pytest.fixture
def interrupted(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path
) -> Iterator[tuple[Path, KubernetesWriter, str]]:
    """The stack applied at OLD, then an apply to NEW killed right after the plugin DaemonSet's change landed
    (its journal entry done), while its slow pods are still starting."""
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC.format(plugin=OLD))
    first = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert first.returncode == 0, first.stdout + first.stderr
    new_image = plugin_image(lab_writer).rsplit(":", 1)[0] + f":{NEW}"
    lab_sim.set_slow_image(new_image, 3)  # the gate is still waiting when the process is killed
    spec.write_text(SPEC.format(plugin=NEW))
    with ApplyProcess(kubeconfig, spec) as process:
        process.wait_for(
            lambda event: event["type"] == "change_complete" and event.get("address") == PLUGIN_ADDRESS
        )
        process.send(signal.SIGKILL)
        assert process.finish(timeout=30) == -signal.SIGKILL
    assert [
        (e["address"], e["state"]) for e in state_of(spec)["journal"] if e["address"] == PLUGIN_ADDRESS
    ] == [(PLUGIN_ADDRESS, "done")]
    assert plugin_image(lab_writer) == new_image
    yield spec, lab_writer, new_image


def test_a_crash_looping_change_of_an_interrupted_apply_is_rolled_back_by_the_next_apply(
    interrupted: tuple[Path, KubernetesWriter, str], lab_sim: Simulator, kubeconfig: Path
) -> None:
    spec, writer, new_image = interrupted
    lab_sim.set_image_fault(new_image, "CrashLoopBackOff")
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec))
    assert "the last apply was interrupted" in plan.stdout + plan.stderr
    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert "interrupted apply failed its health gates" in resumed.stderr, resumed.stderr
    assert "devicePlugin" in resumed.stderr and "CrashLoopBackOff" in resumed.stderr
    assert "Rolled back" in resumed.stderr and PLUGIN_ADDRESS in resumed.stderr
    assert plugin_image(writer).endswith(f":{OLD}")
    assert state_of(spec)["journal"] == []


def test_a_healthy_change_of_an_interrupted_apply_is_verified_and_the_journal_cleared(
    interrupted: tuple[Path, KubernetesWriter, str], kubeconfig: Path
) -> None:
    spec, writer, new_image = interrupted
    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "the last apply was interrupted" in resumed.stdout
    assert "journal is cleared" in resumed.stdout and "No changes" in resumed.stdout, resumed.stdout
    assert plugin_image(writer) == new_image
    assert state_of(spec)["journal"] == []
    # the interrupted apply is a generation of its own, which a rollback can return to
    history = gpuplan(kubeconfig, "state", "history", "-f", str(spec), "--json")
    assert history.returncode == 0, history.stdout + history.stderr
    generations = json.loads(history.stdout)["generations"]
    assert [g["outcome"] for g in generations] == ["applied", "resumed"], generations
    assert generations[-1]["spec_digest"] == spec_digest(load_spec(spec))


@dataclass(frozen=True)
class HalfMade:
    """An apply adding GFD, killed after GFD's ServiceAccount and RBAC and before its DaemonSet."""

    spec: Path
    made: list[str]
    """The addresses the killed apply created (the ServiceAccount and RBAC), in the order it made them."""
    objects: set[str]
    """The refs of every object of GFD the plan creates."""
    image: str
    """The GFD DaemonSet's image."""


@pytest.fixture
def half_made(lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path) -> HalfMade:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(GFD_SPEC.format(owner="none"))
    first = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert first.returncode == 0, first.stdout + first.stderr
    spec.write_text(GFD_SPEC.format(owner="gpuplan"))
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec), "--json")
    changes = [c for c in json.loads(plan.stdout)["changes"] if c["action"] != "no-op"]
    assert {c["component"] for c in changes} == {"gfd"} and {c["action"] for c in changes} == {"create"}
    workload: dict[str, Any] = next(c for c in changes if c["kind"] == "DaemonSet")
    made = sorted(
        (c for c in changes if kind_rank(c["kind"]) < kind_rank("DaemonSet")),
        key=lambda c: (kind_rank(c["kind"]), c["address"]),
    )
    assert made, "GFD has objects made before its DaemonSet"
    # one apply, one component: two state writes per change (the journal entry, then the record)
    killed = gpuplan(
        kubeconfig, "apply", "-f", str(spec), "--auto-approve", env={KILL_AT: str(2 * len(made))}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    journal = state_of(spec)["journal"]
    assert [(e["address"], e["state"]) for e in journal] == [(c["address"], "done") for c in made]
    assert lab_writer.read(ObjectKey.of(workload["after"])) is None
    image: str = workload["after"]["spec"]["template"]["spec"]["containers"][0]["image"]
    return HalfMade(spec, [c["address"] for c in made], {c["object"] for c in changes}, image)


def gfd_leftovers(half: HalfMade, writer: KubernetesWriter) -> tuple[set[str], list[str]]:
    """GFD's objects in the cluster, and its records in the state."""
    records = [address for address in state_of(half.spec)["resources"] if address.startswith("gfd/")]
    return stack_objects(writer) & half.objects, records


def test_a_half_made_component_is_undone_first_so_a_failing_apply_leaves_none_of_it(
    half_made: HalfMade, lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path
) -> None:
    lab_sim.set_image_fault(half_made.image, "CrashLoopBackOff")
    resumed = gpuplan(kubeconfig, "apply", "-f", str(half_made.spec), "--auto-approve")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert f"made {len(half_made.made)} of its object(s) but never its workload" in resumed.stdout, (
        resumed.stdout
    )
    assert "gfd" in resumed.stderr and "CrashLoopBackOff" in resumed.stderr, resumed.stderr
    assert "Rolled back" in resumed.stderr
    assert gfd_leftovers(half_made, lab_writer) == (set(), [])
    assert state_of(half_made.spec)["journal"] == []


def test_a_half_made_component_is_created_whole_by_the_next_apply(
    half_made: HalfMade, lab_writer: KubernetesWriter, kubeconfig: Path
) -> None:
    resumed = gpuplan(kubeconfig, "apply", "-f", str(half_made.spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert all(address in resumed.stdout for address in half_made.made), resumed.stdout
    assert "Apply complete" in resumed.stdout, resumed.stdout
    cluster, records = gfd_leftovers(half_made, lab_writer)
    assert cluster == half_made.objects and len(records) == len(half_made.objects)
    plan = gpuplan(kubeconfig, "plan", "-f", str(half_made.spec), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr


@pytest.mark.parametrize("kill_at", [1, 4])
def test_a_kill_while_a_half_made_component_is_undone_leaves_a_state_the_next_apply_converges_from(
    half_made: HalfMade, lab_writer: KubernetesWriter, kubeconfig: Path, kill_at: int
) -> None:
    killed = gpuplan(
        kubeconfig, "apply", "-f", str(half_made.spec), "--auto-approve", env={KILL_AT: str(kill_at)}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert_everything_accounted_for(half_made.spec, lab_writer)
    resumed = gpuplan(kubeconfig, "apply", "-f", str(half_made.spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # each undo the kill let finish wrote two states (its entry, then the record) and cancels out its create;
    # a pending one is reconciled away, so its create is undone again (a delete of nothing)
    still_made = len(half_made.made) - kill_at // 2
    assert f"made {still_made} of its object(s) but never its workload" in resumed.stdout, resumed.stdout
    converge(half_made.spec, kubeconfig)
    assert_everything_accounted_for(half_made.spec, lab_writer)
