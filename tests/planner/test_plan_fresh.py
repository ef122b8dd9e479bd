"""What makes a saved plan stale (planner/plan/planfile.py ``check_fresh``): a status write moves an object's
resourceVersion and nothing the plan is held to, so the plan stays fresh; a spec change (generation), a label
or annotation edit, a ConfigMap's data (a kind without generation) and a deleted-and-recreated object (uid)
make it stale. Plans saved before fingerprints existed keep the resourceVersion rule and say why in the hint.

The same question at write time (planner/apply/steps.py ``guarded_write``): a write held to the plan's
resourceVersion goes ahead after status writes, even racing ones (bounded), and stops naming the owned field a
hand edit changed.

The objects are stored as an API server stores them (:class:`Server`), so that the kinds without
``metadata.generation`` really lack it (the provider fake gives every kind one).
"""

from __future__ import annotations

import copy
import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.errors import StalePlanError
from gpuplan.planner.diff.guard import GUARD_ATTEMPTS, OwnedFieldsChanged, guarded_write
from gpuplan.planner.plan import planfile
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.kubernetes_write import DriftDetected
from gpuplan.providers.snapshot import ClusterSnapshot, LiveObject, ObjectKey, content_digests

SPEC = lab_spec(driver="{owner: external}")
DS = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
SA = ObjectKey("v1", "ServiceAccount", "gpu-operator", "nvidia-device-plugin")
CM = ObjectKey("v1", "ConfigMap", "gpu-operator", "device-plugin-config")
CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": CM.name, "namespace": CM.namespace, "labels": {"gpuplan.io/stack": "lab"}},
    "data": {"config.yaml": "version: v1\nsharing: {timeSlicing: {resources: [{replicas: 2}]}}\n"},
}
WITH_GENERATION = frozenset({"DaemonSet", "Deployment"})
"""The kinds here whose registry strategy keeps metadata.generation (ConfigMap, ServiceAccount ... do not)."""


class Server:
    """Objects as the API server stores them: a uid per object, one resourceVersion counter, generation for
    the kinds that have one (moved by a change outside metadata and status), status written on its own."""

    def __init__(self) -> None:
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self._versions = itertools.count(100)

    def create(self, manifest: dict[str, Any]) -> None:
        obj = copy.deepcopy(manifest)
        metadata = obj["metadata"]
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(self._versions)),
            creationTimestamp="2026-11-29T12:00:00Z",
            managedFields=[{"manager": "gpuplan", "operation": "Apply", "time": "2026-11-29T12:00:00Z"}],
        )
        if obj["kind"] in WITH_GENERATION:
            metadata["generation"] = 1
            obj["status"] = {"desiredNumberScheduled": 1, "numberReady": 1, "observedGeneration": 1}
        self.objects[ObjectKey.of(obj)] = obj

    def update(
        self, key: ObjectKey, edit: Callable[[dict[str, Any]], None], manager: str = "kubectl-edit"
    ) -> None:
        obj = copy.deepcopy(self.objects[key])
        edit(obj)
        metadata = obj["metadata"]
        old = self.objects[key]
        if "generation" in metadata and _outside_metadata(old) != _outside_metadata(obj):
            metadata["generation"] += 1
        metadata["resourceVersion"] = str(next(self._versions))
        metadata["managedFields"] = [*metadata["managedFields"], {"manager": manager, "operation": "Update"}]
        self.objects[key] = obj

    def write_status(self, key: ObjectKey, **status: Any) -> None:
        """What the DaemonSet controller does when a pod restarts: the status subresource, nothing else."""
        obj = copy.deepcopy(self.objects[key])
        obj["status"] = {**obj.get("status", {}), **status}
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        obj["metadata"]["managedFields"] = [
            *obj["metadata"]["managedFields"],
            {
                "manager": "daemon-set-controller",
                "operation": "Update",
                "subresource": "status",
                "time": f"2026-11-29T12:{len(obj['metadata']['managedFields']):02d}:00Z",
            },
        ]
        self.objects[key] = obj

    def recreate(self, key: ObjectKey) -> None:
        """Deleted and created again with the same content (``kubectl replace --force``)."""
        obj = self.objects.pop(key)
        for server_set in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
            obj["metadata"].pop(server_set, None)
        obj.pop("status", None)
        self.create(obj)

    def read(self, key: ObjectKey) -> LiveObject | None:
        obj = self.objects.get(key)
        return LiveObject(key, copy.deepcopy(obj)) if obj is not None else None

    def conditional_write(self, key: ObjectKey, *, races: int = 0) -> Callable[[str | None], LiveObject]:
        """A write held to a resourceVersion, as KubernetesWriter's: DriftDetected when the object is at
        another one. The first ``races`` calls are each preceded by a status write (the controller racing)."""
        calls = itertools.count()

        def write(version: str | None) -> LiveObject:
            if next(calls) < races:
                self.write_status(key, numberReady=0)
            live = self.read(key)
            if live is None or live.resource_version != version:
                raise DriftDetected(key, expected=version, found=live)
            self.update(key, lambda obj: obj["metadata"]["labels"].update(written="yes"), manager="gpuplan")
            written = self.read(key)
            assert written is not None
            return written

        return write

    def snapshot(self) -> ClusterSnapshot:
        managed = {key: LiveObject(key, copy.deepcopy(obj)) for key, obj in sorted(self.objects.items())}
        return ClusterSnapshot(managed=managed, foreign=(), nodes=(), server_version="v1.34.1", requests=1)


def _outside_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in obj.items() if name not in ("metadata", "status")}


@pytest.fixture
def spec() -> Spec:
    return parse_spec(SPEC, filename="gpustack.yaml")


@pytest.fixture
def server(spec: Spec) -> Server:
    """The device plugin's DaemonSet and ServiceAccount as rendered, and a labelled ConfigMap."""
    server = Server()
    rendered = {ObjectKey.of(obj.manifest): obj.manifest for obj in spec.desired_objects()}
    for key in (DS, SA):
        server.create(copy.deepcopy(dict(rendered[key])))
    server.create(CONFIG_MAP)
    return server


def plan_of(spec: Spec, server: Server) -> Plan:
    return make_plan(spec, None, server.snapshot(), created_at="2026-11-29T12:00:00Z")


def stale_detail(plan: Plan, server: Server) -> str:
    with pytest.raises(StalePlanError) as caught:
        planfile.check_fresh(plan, None, server.snapshot())
    assert caught.value.summary == "Saved plan is stale"
    assert caught.value.hint == planfile.REPLAN_HINT
    return caught.value.detail


def test_status_writes_move_resource_versions_but_leave_the_plan_fresh(spec: Spec, server: Server) -> None:
    plan = plan_of(spec, server)
    server.write_status(DS, numberReady=0, numberUnavailable=1)  # the plugin's pod restarts ...
    server.write_status(DS, numberReady=1, numberUnavailable=None)  # ... and is ready again
    assert server.snapshot().resource_versions()[DS.ref] != plan.resource_versions[DS.ref]
    planfile.check_fresh(plan, None, server.snapshot())


def test_a_spec_change_moves_the_generation_and_makes_the_plan_stale(spec: Spec, server: Server) -> None:
    plan = plan_of(spec, server)

    def set_image(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"

    server.update(DS, set_image, manager="kubectl-set")

    assert (
        stale_detail(plan, server)
        == f"{DS.ref} changed after the plan was made: its spec changed (generation "
        "1 -> 2)"
    )


@pytest.mark.parametrize(
    ("part", "edit"),
    [
        ("metadata.labels", lambda obj: obj["metadata"]["labels"].update(team="ml")),
        (
            "metadata.annotations",
            lambda obj: obj["metadata"].setdefault("annotations", {}).update(owner="ml-infra"),
        ),
        (
            "metadata.ownerReferences",
            lambda obj: obj["metadata"].update(
                ownerReferences=[
                    {
                        "apiVersion": "nvidia.com/v1",
                        "kind": "ClusterPolicy",
                        "name": "cluster-policy",
                        "uid": "cp-1",
                    }
                ]
            ),
        ),
    ],
)
def test_a_metadata_edit_keeps_the_generation_but_makes_the_plan_stale(
    spec: Spec, server: Server, part: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    plan = plan_of(spec, server)
    server.update(DS, edit)
    assert server.objects[DS]["metadata"]["generation"] == 1
    assert stale_detail(plan, server) == f"{DS.ref} changed after the plan was made: its {part} changed"


def test_an_annotation_a_controller_writes_after_a_spec_change_is_not_content(
    spec: Spec, server: Server
) -> None:
    plan = plan_of(spec, server)
    server.update(
        DS,
        lambda obj: (
            obj["metadata"]
            .setdefault("annotations", {})
            .update({"deprecated.daemonset.template.generation": "1"})
        ),
        manager="kube-apiserver",
    )
    planfile.check_fresh(plan, None, server.snapshot())


def test_a_config_map_has_no_generation_and_a_data_edit_makes_the_plan_stale(
    spec: Spec, server: Server
) -> None:
    plan = plan_of(spec, server)
    assert "generation" not in server.objects[CM]["metadata"]
    server.update(CM, lambda obj: obj["data"].update({"config.yaml": "version: v1\n"}))
    assert stale_detail(plan, server) == f"{CM.ref} changed after the plan was made: its data changed"


def test_an_object_deleted_and_created_again_is_another_object(spec: Spec, server: Server) -> None:
    plan = plan_of(spec, server)
    old_uid = server.objects[SA]["metadata"]["uid"]
    server.recreate(SA)
    new_uid = server.objects[SA]["metadata"]["uid"]
    assert plan.fingerprints is not None
    assert content_digests(server.objects[SA]) == plan.fingerprints[SA.ref].content, "only the uid tells"
    assert stale_detail(plan, server) == (
        f"{SA.ref} was deleted and created again after the plan was made (uid {old_uid} -> {new_uid})"
    )


def test_digests_leave_out_status_and_server_bookkeeping_and_a_generation_kinds_spec(server: Server) -> None:
    daemonset = server.objects[DS]
    bookkept = copy.deepcopy(daemonset)
    bookkept["metadata"].update(
        resourceVersion="999", managedFields=[], creationTimestamp="2027-01-01T00:00:00Z"
    )
    bookkept["status"] = {"numberReady": 0}
    bookkept["spec"]["template"]["spec"]["containers"][0]["image"] = "other"  # generation's business
    assert content_digests(bookkept) == content_digests(daemonset)
    assert "spec" not in content_digests(daemonset) and "data" in content_digests(server.objects[CM])


def old_format(plan: Plan) -> Plan:
    """The plan as a gpuplan without fingerprints saved it (the key absent from the file)."""
    document = plan.document()
    del document["fingerprints"]
    return planfile.loads(json.dumps(document))


def test_a_plan_saved_without_fingerprints_is_still_fresh_when_nothing_moved(
    spec: Spec, server: Server
) -> None:
    old = old_format(plan_of(spec, server))
    assert old.fingerprints is None
    planfile.check_fresh(old, None, server.snapshot())


def test_a_plan_saved_without_fingerprints_keeps_the_resource_version_rule_and_says_so(
    spec: Spec, server: Server
) -> None:
    old = old_format(plan_of(spec, server))
    before = old.resource_versions[DS.ref]
    server.write_status(DS, numberReady=0)
    with pytest.raises(StalePlanError) as caught:
        planfile.check_fresh(old, None, server.snapshot())
    after = server.objects[DS]["metadata"]["resourceVersion"]
    assert (
        caught.value.detail
        == f"{DS.ref} changed after the plan was made (resourceVersion {before} -> {after})"
    )
    assert caught.value.hint == planfile.OLD_PLAN_HINT
    assert "older gpuplan" in caught.value.hint and "gpuplan plan --out FILE" in caught.value.hint


def plan_before(server: Server, key: ObjectKey) -> tuple[str, dict[str, Any]]:
    """The version and the owned fields the plan read (the rendered manifest: what gpuplan sent)."""
    live = server.objects[key]
    owned = {name: value for name, value in copy.deepcopy(live).items() if name != "status"}
    owned["metadata"] = {name: live["metadata"][name] for name in ("name", "namespace", "labels")}
    return live["metadata"]["resourceVersion"], owned


def test_a_write_goes_ahead_through_status_writes_racing_it(server: Server) -> None:
    expected, before = plan_before(server, DS)
    server.write_status(DS, numberReady=0)  # since the plan
    written = guarded_write(
        server, DS, expected, before, server.conditional_write(DS, races=GUARD_ATTEMPTS - 2)
    )
    assert written.labels.get("written") == "yes"


def test_status_writes_that_never_stop_racing_end_the_write_as_drift(server: Server) -> None:
    expected, before = plan_before(server, DS)
    with pytest.raises(DriftDetected) as caught:
        guarded_write(server, DS, expected, before, server.conditional_write(DS, races=GUARD_ATTEMPTS))
    assert not isinstance(caught.value, OwnedFieldsChanged)
    assert "written" not in server.objects[DS]["metadata"]["labels"]


def test_an_owned_field_edited_since_the_plan_stops_the_write_naming_it(server: Server) -> None:
    expected, before = plan_before(server, DS)

    def set_image(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"

    server.update(DS, set_image, manager="kubectl-set")
    container = server.objects[DS]["spec"]["template"]["spec"]["containers"][0]["name"]

    with pytest.raises(OwnedFieldsChanged) as caught:
        guarded_write(server, DS, expected, before, server.conditional_write(DS))
    path = f"spec.template.spec.containers[name={container}].image"
    assert caught.value.summary == f"{DS.ref} changed since the plan: field {path}"
    assert caught.value.detail.startswith(
        f"{path}: 'nvcr.io/nvidia/k8s-device-plugin:v0.20.1' -> 'nvcr.io/nvidia/k8s-device-plugin:v0.17.0'"
    )
    assert "written" not in server.objects[DS]["metadata"]["labels"]


def test_a_value_the_server_spells_differently_is_not_an_owned_change(server: Server) -> None:
    """The guard compares as the plan's diff does (0.5 CPU and 500m are one quantity), not byte for byte."""

    def limit(cpu: str) -> Callable[[dict[str, Any]], None]:
        def edit(obj: dict[str, Any]) -> None:
            obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu}}

        return edit

    server.update(DS, limit("0.5"), manager="gpuplan")
    expected, before = plan_before(server, DS)
    server.update(DS, limit("500m"), manager="kube-apiserver")
    written = guarded_write(server, DS, expected, before, server.conditional_write(DS))
    assert written.labels.get("written") == "yes"


def test_an_object_gone_since_the_plan_is_drift(server: Server) -> None:
    expected, before = plan_before(server, DS)
    del server.objects[DS]
    with pytest.raises(DriftDetected, match="now is absent"):
        guarded_write(server, DS, expected, before, server.conditional_write(DS))
