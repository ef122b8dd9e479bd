"""The registries the cluster shows a node cannot reach (pods waiting on a pull, recent Failed Events), and
the plan errors of the images a plan would pull there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuplan.errors import AccessDeniedError
from gpuplan.planner.observe import pull_failures
from gpuplan.planner.observe.pull_failures import PullFailure, PullFailures
from gpuplan.planner.plan import pulls
from gpuplan.planner.plan.model import Change, Reason

IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
DNS = (
    f'rpc error: code = Unknown desc = failed to pull and unpack image "{IMAGE}": failed to resolve '
    f'reference "{IMAGE}": failed to do request: Head '
    '"https://nvcr.io/v2/nvidia/k8s-device-plugin/manifests/v0.20.1": '
    "dial tcp: lookup nvcr.io on 127.0.0.53:53: no such host"
)
TIMEOUT = "failed to do request: Head ...: dial tcp 52.11.24.105:443: i/o timeout"
NOT_FOUND = f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": ... not found'
NOW = 1_800_000_000.0


def pod(node: str, reason: str, message: str, *, init: bool = False, image: str = IMAGE) -> dict[str, Any]:
    status = {"name": "c", "image": image, "state": {"waiting": {"reason": reason, "message": message}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"spec": {"nodeName": node}, "status": {"phase": "Pending", key: [status]}}


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (DNS, "no such host"),
        (TIMEOUT, "i/o timeout"),
        (f'Back-off pulling image "{IMAGE}": ErrImagePull: {DNS}', "no such host"),
        (NOT_FOUND, None),  # the registry answered: the tag does not exist
        ("pull access denied, repository does not exist or may require authorization", None),
        ("503 Service Unavailable", None),
        (f'Back-off pulling image "{IMAGE}"', None),
    ],
)
def test_a_network_error_is_told_from_an_answer_of_the_registry(message: str, error: str | None) -> None:
    assert pull_failures.network_error(message) == error


def test_a_pod_waiting_on_a_pull_says_which_registry_its_node_cannot_reach() -> None:
    assert pull_failures.pod_failures(pod("n1", "ImagePullBackOff", DNS)) == (
        PullFailure("n1", "nvcr.io", "no such host"),
    )
    assert pull_failures.pod_failures(pod("n1", "ErrImagePull", TIMEOUT, init=True, image="busybox:1")) == (
        PullFailure("n1", "docker.io", "i/o timeout"),
    )
    assert pull_failures.pod_failures(pod("n1", "CrashLoopBackOff", DNS)) == ()
    assert pull_failures.pod_failures(pod("n1", "ErrImagePull", NOT_FOUND)) == ()
    assert pull_failures.pod_failures(pod("", "ErrImagePull", DNS)) == (), "not on a node yet"


def event(message: str, last: str, host: str = "n2") -> dict[str, Any]:
    return {
        "reason": "Failed",
        "message": message,
        "source": {"component": "kubelet", "host": host},
        "lastTimestamp": last,
    }


def test_a_recent_failed_event_counts_and_an_old_one_does_not() -> None:
    since = NOW - pull_failures.RECENT_SECONDS
    recent = event(f'Failed to pull image "{IMAGE}": {DNS}', "2027-01-15T08:00:00Z")
    stamp = pull_failures._epoch("2027-01-15T08:00:00Z")
    assert stamp is not None
    assert pull_failures.event_failure(recent, stamp - 1) == PullFailure("n2", "nvcr.io", "no such host")
    assert pull_failures.event_failure(recent, stamp + 1) is None, "older than the window"
    assert pull_failures.event_failure(event("Error: ErrImagePull", "2027-01-15T08:00:00Z"), since) is None
    missing = event(f'Failed to pull image "{IMAGE}": {NOT_FOUND}', "2027-01-15T08:00:00Z")
    assert pull_failures.event_failure(missing, 0) is None


class Lister:
    """Two lists: the Pending pods and the Pods' Failed Events, each one request."""

    def __init__(
        self, pods: list[dict[str, Any]], events: list[dict[str, Any]], denied: tuple[str, ...] = ()
    ) -> None:
        self.items = {"Pod": pods, "Event": events}
        self.denied = denied
        self.request_count = 0
        self.selectors: list[tuple[str, str | None]] = []

    def list_reduced(
        self,
        api_version: str,
        kind: str,
        reduce: Callable[[dict[str, Any]], Any],
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Any]:
        self.request_count += 1
        self.selectors.append((kind, field_selector))
        if kind in self.denied:
            raise AccessDeniedError(f"list {kind}: forbidden")
        return [reduce(item) for item in self.items[kind]]


def test_gather_reads_two_selected_lists_and_keeps_one_error_per_registry_and_node() -> None:
    stamp = "2027-01-15T08:00:00Z"
    when = pull_failures._epoch(stamp)
    assert when is not None
    lister = Lister(
        [pod("n1", "ErrImagePull", DNS), pod("n1", "ImagePullBackOff", TIMEOUT)],
        [event(f'Failed to pull image "{IMAGE}": {TIMEOUT}', stamp, host="n2")],
    )
    found = pull_failures.gather(lister, clock=lambda: when + 1)
    assert lister.selectors == [
        ("Pod", "status.phase=Pending"),
        ("Event", "involvedObject.kind=Pod,reason=Failed"),
    ]
    assert found == PullFailures({"nvcr.io": {"n1": "no such host", "n2": "i/o timeout"}}, requests=2)
    assert found.on("nvcr.io", ["n2", "n3"]) == {"n2": "i/o timeout"}


def test_a_source_the_credentials_may_not_list_is_left_out() -> None:
    lister = Lister([pod("n1", "ErrImagePull", DNS)], [], denied=("Event",))
    assert pull_failures.gather(lister).unreachable == {"nvcr.io": {"n1": "no such host"}}


def daemonset_change(action: str, after: list[str], before: list[str] | None = None, **extra: Any) -> Change:
    def manifest(images: list[str]) -> dict[str, Any]:
        containers = [{"name": f"c{i}", "image": image, **extra} for i, image in enumerate(images)]
        return {"spec": {"template": {"spec": {"containers": containers}}}}

    return Change(
        address="devicePlugin.apps/v1/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
        component="devicePlugin",
        kind="DaemonSet",
        object="apps/v1/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset",
        action=action,  # type: ignore[arg-type]
        reason=Reason.CREATE_BECAUSE_ABSENT if action == "create" else Reason.UPDATE_BECAUSE_SPEC_CHANGED,
        reason_text="",
        before=manifest(before) if before is not None else None,
        after=manifest(after),
        nodes=("n1", "n2", "n3"),
    )


def test_only_images_a_change_makes_its_pods_pull_are_judged() -> None:
    old = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert pulls.pulled_images(daemonset_change("create", [IMAGE])) == (IMAGE,)
    assert pulls.pulled_images(daemonset_change("update", [IMAGE], [old])) == (IMAGE,)
    assert pulls.pulled_images(daemonset_change("update", [IMAGE], [IMAGE])) == (), "already on the nodes"
    always = daemonset_change("update", [IMAGE], [IMAGE], imagePullPolicy="Always")
    assert pulls.pulled_images(always) == (IMAGE,), "pulled at every start"
    assert pulls.pulled_images(daemonset_change("delete", [IMAGE])) == ()


def test_one_refusal_per_repository_names_its_nodes_and_the_field_of_the_mirror() -> None:
    failures = PullFailures({"nvcr.io": {"n1": "no such host", "n3": "i/o timeout", "n9": "no such host"}})
    change = daemonset_change("create", [IMAGE, "nvcr.io/nvidia/gpu-operator:v26.7.0"])
    configured = {"nvcr.io/nvidia/gpu-operator": ["validator"]}
    found = pulls.refusals([change], failures, configured)
    assert [(f.component, f.node) for f in found] == [
        ("devicePlugin", "n1"),
        ("devicePlugin", "n3"),
        ("validator", "n1"),
        ("validator", "n3"),
    ], "n9 runs none of the pods"
    assert (
        found[0].message
        == found[1].message
        == (
            "nvcr.io/nvidia/k8s-device-plugin: these nodes cannot reach nvcr.io (their pulls from it fail "
            "with i/o timeout; no such host), so the pods of devicePlugin cannot pull it there"
        )
    )
    assert found[2].hint.startswith("pull it from a mirror these nodes reach: set spec.validator.repository")
    assert pulls.refusals([change], PullFailures(), configured) == []


@pytest.mark.parametrize(
    ("image", "repository", "registry"),
    [
        (IMAGE, "nvcr.io/nvidia/k8s-device-plugin", "nvcr.io"),
        ("nvcr.io/nvidia/driver@sha256:" + "0" * 64, "nvcr.io/nvidia/driver", "nvcr.io"),
        (
            "registry.local:5000/nvidia/dcgm-exporter:4.6.0",
            "registry.local:5000/nvidia/dcgm-exporter",
            "registry.local:5000",
        ),
        ("busybox:1.36", "busybox", "docker.io"),
    ],
)
def test_an_image_reference_splits_as_container_runtimes_read_it(
    image: str, repository: str, registry: str
) -> None:
    assert (pulls.repository_of(image), pull_failures.registry_of(image)) == (repository, registry)
