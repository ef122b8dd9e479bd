"""A failed apply that changed all six components, the driver among them (rolled node by node), is rolled
back exactly: every stack object field for field as before (same uid, nothing added, nothing lost), every
state record's owned fields as before, and the old driver running again on the node.

One H100 node without a host driver or toolkit (the upgrade4 scenario, one node of it), so gpuplan owns the
whole stack. The change touches every component; the DCGM exporter's new image crash-loops, the last gate of
the walk (the validator, which needs only the driver, toolkit and device plugin, goes before it in graph
order), so all six changed and all six are undone, the driver node by node; the rollback's driver gate
expects the restored release (it expected the new one, and the rollback ended "incomplete").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from deepdiff import DeepDiff

from gpuplan.planner.apply.model import ApplyOptions, NullHooks, Outcome
from gpuplan.planner.apply.walker import apply
from gpuplan.planner.observe import refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim import scenario as scenario_mod
from gpuplan.sim.testing import SimFactory
from gpuplan.state.local import LocalFileBackend

OLD, NEW = "580.105.08", "595.91.07"
SERVER_METADATA = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "annotations")
BROKEN_EXPORTER = "4.5.2-4.8.1-distroless"


def spec_text(*, driver: str, changed: bool) -> str:
    extra_env = "    env:\n      - {name: GPUPLAN_TEST, value: changed}\n" if changed else ""
    return (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: six}\nspec:\n"
        f'  driver:\n    version: "{driver}"\n    healthTimeoutSeconds: 60\n'
        "    upgradePolicy: {podDeletion: {force: true, timeoutSeconds: 30}}\n"
        f"  toolkit:\n    healthTimeoutSeconds: 60\n{extra_env}"
        f"  devicePlugin:\n    version: {'v0.20.0' if changed else 'v0.20.1'}\n{extra_env}"
        f"  gfd:\n    version: {'v0.20.0' if changed else 'v0.20.1'}\n"
        f"  dcgmExporter:\n    version: {BROKEN_EXPORTER if changed else '4.6.0-4.8.3-distroless'}\n"
        f"    healthTimeoutSeconds: 30\n"
        f"  validator:\n    healthTimeoutSeconds: 60\n{extra_env}"
    )


def stack_objects(writer: KubernetesWriter, backend: LocalFileBackend) -> dict[str, dict[str, Any]]:
    state = backend.read()
    assert state is not None
    found: dict[str, dict[str, Any]] = {}
    for address, record in state.resources.items():
        live = writer.read(ObjectKey(record.api_version, record.kind, record.namespace, record.name))
        assert live is not None, address
        manifest = {key: value for key, value in live.manifest.items() if key != "status"}
        manifest["metadata"] = {k: v for k, v in manifest["metadata"].items() if k not in SERVER_METADATA}
        found[address] = manifest
    return found


def walk(spec: Spec, writer: KubernetesWriter, backend: LocalFileBackend) -> Any:
    state = backend.read()
    plan = make_plan(spec, state, refresh.refresh(writer, spec, state))
    return apply(
        plan,
        spec=spec,
        backend=backend,
        writer=writer,
        hooks=NullHooks(),
        options=ApplyOptions(poll_seconds=0.5),
    )


def test_a_failed_apply_of_all_six_components_is_rolled_back_exactly(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    data = yaml.safe_load(scenario_mod.load_scenario("upgrade4").model_dump_json(exclude_none=True))
    data["nodes"][0]["count"] = 1
    sim = sim_factory(data, tls=False)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        first = walk(
            parse_spec(spec_text(driver=OLD, changed=False), filename="gpustack.yaml"), writer, backend
        )
        assert first.ok, first.message
        before, records = stack_objects(writer, backend), backend.read()
        assert records is not None
        changing = parse_spec(spec_text(driver=NEW, changed=True), filename="gpustack.yaml")
        sim.set_image_fault(f"nvcr.io/nvidia/k8s/dcgm-exporter:{BROKEN_EXPORTER}", "CrashLoopBackOff")

        result = walk(changing, writer, backend)

        assert result.outcome is Outcome.ROLLED_BACK, result.message
        touched = {address.split("/")[0] for address in result.rolled_back}
        assert touched == {"driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator"}, touched
        after = stack_objects(writer, backend)
        assert sorted(after) == sorted(before)
        for address, manifest in before.items():
            assert after[address] == manifest, (address, DeepDiff(manifest, after[address], verbose_level=2))
        restored = backend.read()
        assert restored is not None
        assert {a: r.owned for a, r in restored.resources.items()} == {
            a: r.owned for a, r in records.resources.items()
        }
        drivers = writer.list_pods(namespace="gpu-operator", label_selector="app=nvidia-driver-daemonset")
        assert {
            p.manifest["spec"]["containers"][0]["image"].split(":")[1].split("-")[0] for p in drivers
        } == {OLD}
