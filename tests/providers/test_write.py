"""The provider's write side at the official client's seam: a small in-memory API server answers
``ApiClient.call_api`` (request building, auth and response handling run for real), and a script injects
faults before or after a request is carried out, so "the server did it, then the connection dropped" is a
test, not a hope. What is proven: the drift guard, retries with Retry-After and backoff through the injected
sleep, a fresh read per attempt, no double create, and the request shapes (SSA, eviction, cordon, proxy)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTResponse

from gpuplan.errors import ProviderError, TransientProviderError
from gpuplan.providers import kubernetes_live
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.kubernetes_write import ANY_VERSION, DriftDetected, KubernetesWriter
from gpuplan.providers.protocols import EvictionRefused, ProxyRefused
from gpuplan.providers.snapshot import LiveObject, ObjectKey

SERVER = "https://cluster.example:6443"
DS_PATH = "/apis/apps/v1/namespaces/gpu-operator/daemonsets"
DISCOVERY = {
    "/api/v1": [
        ("pods", "Pod", True),
        ("nodes", "Node", False),
        ("namespaces", "Namespace", False),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
    ],
    "/apis/apps/v1": [("daemonsets", "DaemonSet", True)],
}


@dataclass
class Fault:
    """Done to the first request that matches ``method`` and ends with ``suffix``: ``before`` answers instead
    of carrying it out (status, body, headers); ``drop_after`` carries it out and then drops the
    connection."""

    method: str
    suffix: str = ""
    before: tuple[int, dict[str, Any], dict[str, str]] | None = None
    drop_after: bool = False
    status_after: int | None = None


@dataclass
class FakeApi:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    log: list[tuple[str, str, dict[str, list[str]], Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    rv: int = 10
    proxy_text: bytes = b'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 0\n'

    def store(self, path: str, obj: dict[str, Any], manager: str = "kubectl-edit") -> dict[str, Any]:
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{meta.get('name')}-{self.rv}")
        meta["managedFields"] = [{"manager": manager, "operation": "Update"}]
        self.objects[path] = obj
        return obj

    def calls(self, method: str) -> list[str]:
        return [path for m, path, _, _ in self.log if m == method]

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if path in DISCOVERY:
            return 200, {
                "resources": [{"name": n, "kind": k, "namespaced": ns} for n, k, ns in DISCOVERY[path]]
            }
        if "/proxy/" in path:
            return 200, self.proxy_text
        if method == "GET":
            return self._get(path, query)
        if method == "POST" and path.endswith("/eviction"):
            return (
                (201, {"status": "Success"})
                if self.objects.pop(path[: -len("/eviction")], None)
                else _missing()
            )
        if method == "POST":
            item = f"{path}/{body['metadata']['name']}"
            if item in self.objects:
                return 409, {
                    "kind": "Status",
                    "reason": "AlreadyExists",
                    "code": 409,
                    "message": f'{body["kind"]} "{body["metadata"]["name"]}" already exists',
                }
            if "dryRun" in query:
                return 201, body
            return 201, self.store(item, copy.deepcopy(body), "gpuplan")
        if method == "PATCH":
            return self._patch(path, query, body)
        if method == "DELETE":
            return self._delete(path, body)
        raise AssertionError(f"unexpected {method} {path}")

    def _get(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path in self.objects:
            return 200, self.objects[path]
        items = [obj for key, obj in sorted(self.objects.items()) if key.rsplit("/", 1)[0] == path]
        if not items and not path.endswith("s"):
            return _missing()
        start = int(query.get("continue", ["0"])[0])
        limit = int(query.get("limit", ["500"])[0])
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return 200, {"kind": "List", "metadata": meta, "items": page}

    def _patch(self, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        live = copy.deepcopy(self.objects.get(path) or {})
        if not live and query.get("fieldManager") != ["gpuplan"]:
            return _missing()
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if live and wanted not in (
            None,
            live["metadata"]["resourceVersion"],
        ):  # a precondition, as SSA has it
            return 409, {
                "kind": "Status",
                "reason": "Conflict",
                "code": 409,
                "message": "the object has been modified; please apply your changes to the latest version",
            }
        merged = _merge(live, body)
        if "dryRun" in query:
            return 200, merged
        return 200, self.store(path, merged, query["fieldManager"][0])

    def _delete(self, path: str, body: Any) -> tuple[int, Any]:
        live = self.objects.get(path)
        if live is None:
            return _missing()
        wanted = (body or {}).get("preconditions") or {}
        if wanted.get("resourceVersion") not in (None, live["metadata"]["resourceVersion"]):
            return 409, {
                "kind": "Status",
                "reason": "Conflict",
                "code": 409,
                "message": "precondition failed",
            }
        return 200, self.objects.pop(path)


def _missing() -> tuple[int, Any]:
    return 404, {"kind": "Status", "reason": "NotFound", "code": 404, "message": "not found"}


def _merge(live: Any, patch: Any) -> Any:
    if not isinstance(live, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(live)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(live.get(key), value)
    return merged


class FakeClient(ApiClient):
    """The official client with its one network call answered by :class:`FakeApi`."""

    def __init__(self, api: FakeApi) -> None:
        super().__init__(
            Configuration(
                host=SERVER, api_key={"authorization": "t0ken"}, api_key_prefix={"authorization": "Bearer"}
            )
        )
        self.api = api

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.api.log.append((method, parts.path, query, copy.deepcopy(body)))
        self.api.headers.append(dict(header_params or {}))
        fault = next(
            (f for f in self.api.faults if f.method == method and parts.path.endswith(f.suffix)), None
        )
        if fault is not None:
            self.api.faults.remove(fault)
            if fault.before is not None:
                return _response(*fault.before)
        status, payload = self.api.handle(method, parts.path, query, body)
        if fault is not None and fault.drop_after:
            raise urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
        if fault is not None and fault.status_after is not None:
            return _response(
                fault.status_after,
                {"kind": "Status", "code": fault.status_after, "message": "the server timed out"},
                {},
            )
        return _response(status, payload, {})


def _response(status: int, payload: Any, headers: dict[str, str]) -> RESTResponse:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return RESTResponse(
        urllib3.HTTPResponse(body=data, status=status, headers=headers, preload_content=False)
    )


@pytest.fixture
def cluster() -> Iterator[Callable[..., tuple[FakeApi, KubernetesWriter, list[float]]]]:
    made: list[KubernetesWriter] = []

    def make(*objects: tuple[str, dict[str, Any]]) -> tuple[FakeApi, KubernetesWriter, list[float]]:
        api = FakeApi()
        for path, obj in objects:
            api.store(path, obj)
        sleeps: list[float] = []
        writer = KubernetesWriter(
            api_client=FakeClient(api), sleep=sleeps.append, retry=RetryPolicy(attempts=4)
        )
        made.append(writer)
        return api, writer, sleeps

    yield make
    for writer in made:
        writer.close()


def daemonset(image: str = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "labels": {"gpuplan.io/stack": "lab"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "exporter", "image": image}]}}},
    }


DS = (f"{DS_PATH}/nvidia-dcgm-exporter", daemonset())
KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")


# ------------------------------------------------------------------------------------------ apply


def test_apply_reads_then_server_side_applies_as_gpuplan(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    live = writer.apply(daemonset("exporter:new"), expected_rv="11")
    assert [method for method, path, *_ in api.log if path == DS[0]] == ["GET", "PATCH"]
    method, path, query, body = api.log[-1]
    assert (path, query["fieldManager"], query["force"]) == (DS[0], ["gpuplan"], ["true"])
    assert api.headers[-1]["Content-Type"] == "application/apply-patch+yaml"
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "exporter:new"
    assert live.resource_version == "12" and live.key == KEY


def test_apply_refuses_a_change_the_plan_did_not_see(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    api.store(
        DS[0], daemonset("edited-by-hand"), manager="kubectl-edit"
    )  # rv 11 -> 12 behind the plan's back
    with pytest.raises(DriftDetected) as caught:
        writer.apply(daemonset("exporter:new"), expected_rv="11")
    assert api.calls("PATCH") == []
    assert caught.value.summary == (
        f"{KEY.ref} changed since the plan: it was at resourceVersion 11 and now is at resourceVersion 12"
    )
    assert caught.value.detail == "changed by: kubectl-edit"
    assert api.objects[DS[0]]["spec"]["template"]["spec"]["containers"][0]["image"] == "edited-by-hand"


def test_a_status_writer_is_not_named_as_who_changed_the_object() -> None:
    found = LiveObject(
        KEY,
        {
            **daemonset("exporter:old"),
            "metadata": {
                "name": KEY.name,
                "namespace": KEY.namespace,
                "resourceVersion": "13",
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
                    {"manager": "kubectl-edit", "operation": "Update"},
                    {"manager": "gpuplan", "operation": "Apply"},
                ],
            },
        },
    )
    assert DriftDetected(KEY, expected="11", found=found).detail == "changed by: kubectl-edit"


def test_a_change_between_the_guards_read_and_the_write_is_refused(cluster: Any) -> None:
    """The apply body carries the plan's resourceVersion, so the server refuses a write over a change made
    after the guard's read; the retry's fresh read then reports the drift."""
    api, writer, _ = cluster(DS)
    original = api.handle

    def edit_right_after_the_read(method: str, path: str, query: Any, body: Any) -> Any:
        answer = original(method, path, query, body)
        if method == "GET" and path == DS[0] and not api.calls("PATCH"):
            api.store(DS[0], daemonset("racing-edit"))
        return answer

    api.handle = edit_right_after_the_read
    with pytest.raises(DriftDetected, match="now is at resourceVersion 12"):
        writer.apply(daemonset("exporter:new"), expected_rv="11")
    assert api.log[[m for m, *_ in api.log].index("PATCH")][3]["metadata"]["resourceVersion"] == "11"
    assert api.objects[DS[0]]["spec"]["template"]["spec"]["containers"][0]["image"] == "racing-edit"


def test_apply_of_an_object_the_plan_saw_absent_refuses_one_that_appeared(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    with pytest.raises(DriftDetected, match="it was absent and now is at resourceVersion 11"):
        writer.apply(daemonset(), expected_rv=None)
    assert api.calls("PATCH") == []


def test_a_conflict_is_retried_after_a_fresh_read(cluster: Any) -> None:
    api, writer, sleeps = cluster(DS)
    api.faults.append(
        Fault(
            "PATCH",
            before=(
                409,
                {
                    "kind": "Status",
                    "code": 409,
                    "reason": "Conflict",
                    "message": "the object has been modified",
                },
                {},
            ),
        )
    )
    writer.apply(daemonset("exporter:new"), expected_rv="11")
    assert len(api.calls("PATCH")) == 2 and api.calls("GET").count(DS[0]) == 2
    assert sleeps == [0.25]


def test_retry_after_is_honoured_and_backoff_grows(cluster: Any) -> None:
    api, writer, sleeps = cluster(DS)
    api.faults += [
        Fault(
            "PATCH",
            before=(429, {"kind": "Status", "code": 429, "message": "slow down"}, {"Retry-After": "3"}),
        ),
        Fault("PATCH", before=(500, {"kind": "Status", "code": 500, "message": "boom"}, {})),
        Fault("PATCH", before=(503, {"kind": "Status", "code": 503, "message": "busy"}, {})),
    ]
    writer.apply(daemonset("exporter:new"))
    assert sleeps == [3.0, 0.5, 1.0]
    assert len(api.calls("PATCH")) == 4


def test_retries_are_bounded(cluster: Any) -> None:
    api, writer, sleeps = cluster(DS)
    api.faults += [Fault("PATCH", before=(503, {"kind": "Status", "code": 503, "message": "busy"}, {}))] * 4
    with pytest.raises(TransientProviderError, match="answered 503"):
        writer.apply(daemonset("exporter:new"))
    assert len(api.calls("PATCH")) == 4 and len(sleeps) == 3


def test_a_refused_write_is_not_retried(cluster: Any) -> None:
    api, writer, sleeps = cluster(DS)
    api.faults.append(
        Fault(
            "PATCH",
            before=(
                422,
                {
                    "kind": "Status",
                    "code": 422,
                    "reason": "Invalid",
                    "message": "spec.selector: Required value",
                },
                {},
            ),
        )
    )
    with pytest.raises(ProviderError, match="answered 422") as caught:
        writer.apply(daemonset("exporter:new"))
    assert not isinstance(caught.value, TransientProviderError)
    assert "spec.selector: Required value" in caught.value.detail
    assert len(api.calls("PATCH")) == 1 and sleeps == []


def test_our_own_landed_apply_is_not_drift(cluster: Any) -> None:
    """The PATCH was carried out, then the connection dropped: the re-read shows a new resourceVersion, but
    with our fields, so it is our write, not someone else's."""
    api, writer, _ = cluster(DS)
    api.faults.append(Fault("PATCH", drop_after=True))
    live = writer.apply(daemonset("exporter:new"), expected_rv="11")
    assert len(api.calls("PATCH")) == 1
    assert live.manifest["spec"]["template"]["spec"]["containers"][0]["image"] == "exporter:new"


def test_a_dropped_apply_followed_by_someone_elses_change_is_drift(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    api.faults.append(Fault("PATCH", before=(504, {"kind": "Status", "code": 504, "message": "timeout"}, {})))

    def edit_after_first_patch(
        method: str, path: str, query: Any, body: Any, original: Callable[..., Any] = api.handle
    ) -> Any:
        if method == "GET" and path == DS[0] and api.calls("PATCH"):
            api.store(DS[0], daemonset("someone-else"))
        return original(method, path, query, body)

    api.handle = edit_after_first_patch
    with pytest.raises(DriftDetected):
        writer.apply(daemonset("exporter:new"), expected_rv="11")


def test_dry_run_answers_without_storing(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    answer = writer.apply(daemonset("exporter:new"), dry_run=True)
    assert api.log[-1][2]["dryRun"] == ["All"]
    assert answer.manifest["spec"]["template"]["spec"]["containers"][0]["image"] == "exporter:new"
    assert api.objects[DS[0]]["spec"]["template"]["spec"]["containers"][0]["image"] != "exporter:new"


# ------------------------------------------------------------------------------------------ create


def test_a_create_whose_connection_dropped_is_read_before_it_is_retried(cluster: Any) -> None:
    api, writer, sleeps = cluster()
    api.faults.append(Fault("PATCH", drop_after=True))
    live = writer.create(daemonset())
    assert api.calls("PATCH") == [f"{DS_PATH}/nvidia-dcgm-exporter"]  # once: the re-read found our object
    assert live.labels["gpuplan.io/stack"] == "lab" and len(api.objects) == 1 and len(sleeps) == 1


def test_a_create_is_a_server_side_apply_so_a_later_apply_can_drop_its_fields(cluster: Any) -> None:
    """gpuplan creates as an Apply manager: a field a later apply leaves out is then removed by the server,
    which it would keep if a POST had made gpuplan its Update manager."""
    api, writer, _ = cluster()
    writer.create(daemonset())
    method, path, query, _ = next(entry for entry in api.log if entry[0] != "GET")
    assert (method, path, query["fieldManager"], query["force"]) == (
        "PATCH",
        f"{DS_PATH}/nvidia-dcgm-exporter",
        ["gpuplan"],
        ["true"],
    )
    assert api.calls("POST") == []


def test_a_create_that_landed_late_is_ours_on_the_retry(cluster: Any) -> None:
    """The first apply timed out but the object became visible by the retry's read, with our stack label:
    the create is done, without a second write."""
    api, writer, _ = cluster()
    api.faults.append(Fault("PATCH", before=(504, {"kind": "Status", "code": 504, "message": "timeout"}, {})))
    original = api.handle
    landed = False

    def first_apply_lands_late(method: str, path: str, query: Any, body: Any) -> Any:
        nonlocal landed
        if method == "GET" and api.calls("PATCH") and not landed:  # the retry's read, after the timeout
            landed = True
            api.store(f"{DS_PATH}/nvidia-dcgm-exporter", daemonset(), "gpuplan")
        return original(method, path, query, body)

    api.handle = first_apply_lands_late
    live = writer.create(daemonset())
    assert len(api.calls("PATCH")) == 1 and len(api.objects) == 1
    assert live.labels["gpuplan.io/stack"] == "lab"


def test_an_object_created_by_someone_else_is_drift(cluster: Any) -> None:
    foreign = daemonset()
    foreign["metadata"]["labels"] = {}
    api, writer, _ = cluster((DS[0], foreign))
    with pytest.raises(DriftDetected, match="it was absent"):
        writer.create(daemonset())
    assert api.calls("PATCH") == []


# ------------------------------------------------------------------------------------------ delete


def test_delete_sends_preconditions_and_tolerates_a_gone_object(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    old = writer.delete(KEY, expected_rv="11")
    assert old is not None and old.resource_version == "11"
    body = api.log[-1][3]
    assert body["propagationPolicy"] == "Background"
    assert body["preconditions"] == {"uid": old.uid, "resourceVersion": "11"}
    assert writer.delete(KEY) is None  # ANY_VERSION: already absent is fine
    with pytest.raises(DriftDetected, match="now is absent"):
        writer.delete(KEY, expected_rv="11")


def test_a_delete_that_landed_before_the_connection_dropped_succeeds(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    api.faults.append(Fault("DELETE", drop_after=True))
    assert writer.delete(KEY, expected_rv="11") is None
    assert DS[0] not in api.objects and len(api.calls("DELETE")) == 1


def test_replace_deletes_waits_and_creates(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    new = writer.replace(daemonset("exporter:new"), expected_rv="11", timeout=5)
    assert [m for m, path, *_ in api.log if path.startswith(DS_PATH) and m != "GET"] == ["DELETE", "PATCH"]
    assert new.uid != "uid-nvidia-dcgm-exporter-11"


# --------------------------------------------------------------------------------- pods and nodes

POD_PATH = "/api/v1/namespaces/gpu-operator/pods"


def test_eviction_blocked_by_a_budget_is_retry_later(cluster: Any) -> None:
    api, writer, sleeps = cluster((f"{POD_PATH}/exp-1", {"metadata": {"name": "exp-1"}}))
    pod = ObjectKey("v1", "Pod", "gpu-operator", "exp-1")
    pdb = {
        "kind": "Status",
        "code": 429,
        "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 1 healthy pods"}]},
    }
    api.faults.append(Fault("POST", "/eviction", before=(429, pdb, {})))
    assert writer.evict(pod) == EvictionRefused("needs 1 healthy pods") and sleeps == []
    api.faults.append(
        Fault(
            "POST",
            "/eviction",
            before=(429, {"kind": "Status", "code": 429, "message": "busy"}, {"Retry-After": "1"}),
        )
    )
    assert writer.evict(pod) is True and sleeps == [1.0]
    body = api.log[-1][3]
    assert body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "exp-1", "namespace": "gpu-operator"},
    }
    assert writer.evict(pod) is True  # gone already
    assert writer.delete_pod(pod) is False


def test_cordon_and_uncordon(cluster: Any) -> None:
    api, writer, _ = cluster(("/api/v1/nodes/lab-node", {"metadata": {"name": "lab-node"}, "spec": {}}))
    assert writer.cordon("lab-node").manifest["spec"]["unschedulable"] is True
    assert api.headers[-1]["Content-Type"] == "application/strategic-merge-patch+json"
    assert "unschedulable" not in writer.cordon("lab-node", on=False).manifest["spec"]
    assert api.log[-1][3] == {"spec": {"unschedulable": None}}


def test_list_pods_follows_continue_tokens(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes_live, "PAGE_SIZE", 2)
    pods = [(f"{POD_PATH}/p{i}", {"metadata": {"name": f"p{i}"}}) for i in range(5)]
    api, writer, _ = cluster(*pods)
    listing = writer.list_pods(
        namespace="gpu-operator", label_selector="app=x", field_selector="spec.nodeName=n"
    )
    assert [pod.key.name for pod in listing] == ["p0", "p1", "p2", "p3", "p4"]
    lists = [query for method, path, query, _ in api.log if path == POD_PATH]
    assert [q.get("continue") for q in lists] == [None, ["2"], ["4"]]
    assert all(q["labelSelector"] == ["app=x"] and q["fieldSelector"] == ["spec.nodeName=n"] for q in lists)
    assert listing.resource_version == "15" and listing.items[0].key.kind == "Pod"


def test_proxy_get_scrapes_once(cluster: Any) -> None:
    api, writer, sleeps = cluster()
    assert writer.proxy_get("gpu-operator", "exp-1", 9400, "/metrics") == api.proxy_text
    assert api.log[-1][1] == f"{POD_PATH}/exp-1:9400/proxy/metrics"
    api.faults.append(
        Fault(
            "GET",
            "/proxy/metrics",
            before=(503, {"kind": "Status", "code": 503, "message": "no endpoints"}, {}),
        )
    )
    with pytest.raises(TransientProviderError, match="scrape gpu-operator/exp-1:9400/metrics"):
        writer.proxy_get("gpu-operator", "exp-1", 9400, "metrics")
    assert sleeps == []


def status_body(code: int, message: str, kind: str | None = None) -> dict[str, Any]:
    details = {"details": {"name": "exp-1", "kind": kind}} if kind else {}
    return {"kind": "Status", "apiVersion": "v1", "code": code, "message": message, **details}


@pytest.mark.parametrize(
    "code,body,reason",
    [
        # the pod registry's ResourceLocation for a pod IP that is not global unicast
        (400, status_body(400, "address not allowed"), "address not allowed"),
        (
            403,
            status_body(403, 'pods "exp-1" is forbidden: User "u" cannot get resource "pods/proxy"'),
            "forbidden",
        ),
        # the exporter's own 404 for the path, passed through by the proxy: not a Status
        (404, b"404 page not found\n", "the proxied server answered 404 for the path: 404 page not found"),
    ],
)
def test_a_proxy_answer_no_wait_changes_is_refused_with_the_servers_words(
    cluster: Any, code: int, body: Any, reason: str
) -> None:
    api, writer, sleeps = cluster()
    api.faults.append(Fault("GET", "/proxy/metrics", before=(code, body, {})))
    with pytest.raises(ProxyRefused) as caught:
        writer.proxy_get("gpu-operator", "exp-1", 9400, "/metrics")
    assert caught.value.status == code and reason in caught.value.reason
    assert sleeps == [], "one attempt"


def test_a_proxied_pod_that_is_gone_is_not_yet_and_a_503_is_transient(cluster: Any) -> None:
    api, writer, _ = cluster()
    api.faults.append(
        Fault("GET", "/proxy/metrics", before=(404, status_body(404, 'pods "exp-1" not found', "pods"), {}))
    )
    with pytest.raises(ProviderError) as gone:
        writer.proxy_get("gpu-operator", "exp-1", 9400, "/metrics")
    assert not isinstance(gone.value, ProxyRefused) and "the pod is gone" in gone.value.summary
    reach = "error trying to reach service: dial tcp 10.0.0.7:9400: connect: connection refused"
    api.faults.append(Fault("GET", "/proxy/metrics", before=(503, status_body(503, reach), {})))
    with pytest.raises(TransientProviderError):
        writer.proxy_get("gpu-operator", "exp-1", 9400, "/metrics")


def test_a_refusal_reason_cannot_drive_the_terminal(cluster: Any) -> None:
    api, writer, _ = cluster()
    hostile = "address\x1b[2J\x1b]0;owned\x07 not\r\nallowed\u202e"
    api.faults.append(Fault("GET", "/proxy/metrics", before=(400, status_body(400, hostile), {})))
    with pytest.raises(ProxyRefused) as caught:
        writer.proxy_get("gpu-operator", "exp-1", 9400, "/metrics")
    assert caught.value.reason == "address [2J ]0;owned not allowed"
    assert caught.value.reason.isprintable() and caught.value.summary.isprintable()


def test_service_proxy_get_goes_through_the_service(cluster: Any) -> None:
    api, writer, _ = cluster()
    assert (
        writer.service_proxy_get("gpu-operator", "nvidia-dcgm-exporter", 9400, "/metrics") == api.proxy_text
    )
    assert (
        api.log[-1][1] == "/api/v1/namespaces/gpu-operator/services/nvidia-dcgm-exporter:9400/proxy/metrics"
    )
    forbidden = status_body(403, 'services "nvidia-dcgm-exporter" is forbidden', "services")
    api.faults.append(Fault("GET", "/proxy/metrics", before=(403, forbidden, {})))
    with pytest.raises(ProxyRefused, match="scrape Service gpu-operator/nvidia-dcgm-exporter"):
        writer.service_proxy_get("gpu-operator", "nvidia-dcgm-exporter", 9400, "/metrics")


def test_any_version_skips_the_guard(cluster: Any) -> None:
    api, writer, _ = cluster(DS)
    api.store(DS[0], daemonset("edited"))
    writer.apply(daemonset("exporter:new"), expected_rv=ANY_VERSION)
    assert api.objects[DS[0]]["spec"]["template"]["spec"]["containers"][0]["image"] == "exporter:new"
