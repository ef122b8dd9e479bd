"""The server on the wire: token check, Status errors with the right code and reason, content types,
keep-alive, watch streams, eviction, the pod proxy and the /sim/ control endpoint."""

from __future__ import annotations

import json
import socket
import socketserver
import ssl
import threading
from typing import Any

import pytest
import yaml
from server_kit import (
    DAEMONSETS,
    NODES,
    PODS,
    TOKEN,
    ControlCalls,
    ProxyCalls,
    Raw,
    daemonset,
    node,
    pod,
    put,
)

from gpuplan.sim.api.server import ApiServer
from gpuplan.sim.api.store import Store


def _is_status(body: Any, code: int, reason: str) -> bool:
    return bool(
        body.get("kind") == "Status"
        and body.get("status") == "Failure"
        and body.get("code") == code
        and body.get("reason") == reason
    )


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_requests_without_the_right_token_get_401_status(raw: Raw, token: str | None) -> None:
    code, body = raw.json("GET", "/api/v1/namespaces", token=token)
    assert code == 401 and _is_status(body, 401, "Unauthorized")


def test_every_path_needs_the_token_even_version_and_sim(raw: Raw) -> None:
    for path in ("/version", "/healthz", "/sim/faults", "/openapi/v3"):
        assert raw.request("GET", path, token=None)[0] == 401


def test_unknown_paths_and_kinds_are_404_status(raw: Raw) -> None:
    for path in (
        "/nope",
        "/api/v1/widgets",
        "/apis/example.com/v1",
        "/api/v1/namespaces/default/pods/x/logz",
        "/openapi/v2",
    ):
        code, body = raw.json("GET", path)
        assert code == 404 and _is_status(body, 404, "NotFound"), path


def test_missing_object_is_404_with_the_apiserver_message(raw: Raw) -> None:
    code, body = raw.json("GET", "/apis/apps/v1/namespaces/default/daemonsets/absent")
    assert code == 404 and body["message"] == 'daemonsets.apps "absent" not found'


# A method no route of the path has: go-restful's 405, as the apiserver's serviceErrorHandler answers it
# (apierrors.NewGenericServerResponse with no resource: the generic message and empty details).
REAL_405 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server does not allow this method on the requested resource",
    "reason": "MethodNotAllowed",
    "details": {},
    "code": 405,
}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/api/v1/namespaces/default/configmaps"),
        ("PATCH", "/api/v1/namespaces/default/configmaps"),
        ("POST", "/api/v1/namespaces/default/configmaps/x"),
        ("POST", "/api/v1/configmaps"),
        ("DELETE", "/api/v1/namespaces/default/pods/p/status"),
        ("GET", "/api/v1/namespaces/default/pods/p/eviction"),
        ("POST", "/api/v1/namespaces/default/pods/absent/log"),
        ("DELETE", "/api/v1/namespaces/default/pods/absent/exec"),
        ("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
        ("POST", "/version"),
    ],
)
def test_wrong_method_is_the_apiservers_405(store: Store, raw: Raw, method: str, path: str) -> None:
    store.create(PODS, pod("p"), manager="test")
    code, body = raw.json(method, path, {"metadata": {"name": "x"}} if method != "GET" else None)
    assert code == 405 and body == REAL_405


def test_malformed_json_and_yaml_bodies_are_400_status(raw: Raw) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    for content_type, payload in (("application/json", "{not json"), ("application/yaml", "a: [unclosed")):
        code, _, data = raw.request("POST", path, payload, headers={"Content-Type": content_type})
        body = json.loads(data)
        assert code == 400 and _is_status(body, 400, "BadRequest")
        assert "\n" not in body["message"]


def test_yaml_bodies_are_accepted(raw: Raw) -> None:
    code, _, data = raw.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-yaml}\ndata: {a: b}\n",
        headers={"Content-Type": "application/yaml"},
    )
    assert code == 201 and json.loads(data)["data"] == {"a": "b"}


def test_a_truncated_protobuf_body_is_400_and_a_kind_without_a_table_415(raw: Raw) -> None:
    protobuf = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    code, _, data = raw.request("POST", "/api/v1/namespaces", b"k8s\x00\n\x0f", headers=protobuf)
    assert code == 400 and _is_status(json.loads(data), 400, "BadRequest")
    assert "the object provided is unrecognized" in json.loads(data)["message"]
    widget = b"k8s\x00" + b"\n\x18\n\x0eexample.com/v1\x12\x06Widget\x12\x00"
    code, _, data = raw.request("POST", "/api/v1/namespaces", widget, headers=protobuf)
    assert code == 415 and _is_status(json.loads(data), 415, "UnsupportedMediaType")


def test_only_protobuf_acceptable_is_406(raw: Raw) -> None:
    code, _, data = raw.request(
        "GET", "/api/v1/namespaces", headers={"Accept": "application/vnd.kubernetes.protobuf"}
    )
    assert code == 406 and _is_status(json.loads(data), 406, "NotAcceptable")


def test_a_bug_is_a_one_line_500_internal_error(
    store: Store, api: ApiServer, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(store, "list", broken)
    code, body = raw.json("GET", "/api/v1/namespaces")
    assert code == 500 and _is_status(body, 500, "InternalError")
    assert "boom" in body["message"] and "\n" not in body["message"] and "Traceback" not in body["message"]


def test_json_is_compact_unless_pretty(raw: Raw) -> None:
    _, _, compact = raw.request("GET", "/api/v1/namespaces/default")
    _, _, pretty = raw.request("GET", "/api/v1/namespaces/default?pretty=true")
    assert b"\n" not in compact and b'\n  "' in pretty
    assert json.loads(compact) == json.loads(pretty)


def test_keep_alive_serves_several_requests_on_one_connection(raw: Raw) -> None:
    conn = raw.connection()
    try:
        for _ in range(3):
            conn.request("GET", "/api/v1/namespaces", headers={"Authorization": f"Bearer {TOKEN}"})
            response = conn.getresponse()
            assert response.status == 200
            response.read()
        assert conn.sock is not None  # still the same, open socket
    finally:
        conn.close()


def test_an_answer_is_one_write_of_headers_and_body(raw: Raw, monkeypatch: pytest.MonkeyPatch) -> None:
    """One TLS record per small answer, not a headers record the body then follows."""
    writes: list[bytes] = []
    real_write = socketserver._SocketWriter.write  # type: ignore[attr-defined]

    def recording(self: Any, data: bytes) -> int:
        writes.append(bytes(data))
        return int(real_write(self, data))

    monkeypatch.setattr(socketserver._SocketWriter, "write", recording)  # type: ignore[attr-defined]
    code, _, body = raw.request("GET", "/api/v1/namespaces/default")
    assert code == 200
    answers = [w for w in writes if w.startswith(b"HTTP/1.1 200")]
    assert len(answers) == 1 and answers[0].endswith(b"\r\n\r\n" + body)


def test_head_answers_headers_without_a_body(raw: Raw) -> None:
    code, headers, body = raw.request("HEAD", "/api/v1/namespaces/default")
    assert code == 200 and body == b"" and int(headers["content-length"]) > 0


def test_binds_only_loopback(api: ApiServer) -> None:
    assert api.url.startswith("https://127.0.0.1:")
    with socket.create_connection(("127.0.0.1", api.port), timeout=5):
        pass


def test_plain_http_mode(store: Store) -> None:
    server = ApiServer(store, token=TOKEN, tls=False)
    server.start()
    try:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/version", headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        assert server.url.startswith("http://") and response.status == 200
        assert json.loads(response.read())["gitVersion"].startswith("v1.37.")
        conn.close()
    finally:
        server.stop()
    assert server.ca_pem == b""


def test_tls_fails_without_the_ca(api: ApiServer) -> None:
    context = ssl.create_default_context()  # the system CAs only
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(sock, server_hostname="127.0.0.1")


def test_field_manager_defaults_to_the_user_agent_prefix(raw: Raw) -> None:
    code, body = raw.json(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "ua"}, "data": {"a": "1"}},
        headers={"User-Agent": "kubectl-patch/v1.37.1 (linux/amd64) kubernetes/abc"},
    )
    assert code == 201
    assert [entry["manager"] for entry in body["metadata"]["managedFields"]] == ["kubectl-patch"]
    code, body = raw.json(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldManager=gpuplan",
        {"metadata": {"name": "explicit"}, "data": {"a": "1"}},
    )
    assert [entry["manager"] for entry in body["metadata"]["managedFields"]] == ["gpuplan"]


def test_apply_patch_without_field_manager_is_422(raw: Raw) -> None:
    code, _, data = raw.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert code == 422 and _is_status(json.loads(data), 422, "Invalid")


def test_strict_field_validation_rejects_unknown_fields_with_the_apiserver_message(raw: Raw) -> None:
    ds = daemonset("strict")
    ds["spec"]["template"]["spec"]["containers"][0]["bogus"] = True
    code, body = raw.json("POST", "/apis/apps/v1/namespaces/default/daemonsets?fieldValidation=Strict", ds)
    assert code == 400 and _is_status(body, 400, "BadRequest")
    assert body["message"] == (
        'DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding '
        'error: unknown field "spec.template.spec.containers[0].bogus"'
    )


def test_warn_field_validation_drops_unknown_fields_with_a_warning_header(raw: Raw) -> None:
    ds = daemonset("warned")
    ds["spec"]["bogus"] = 1
    code, headers, data = raw.request(
        "POST",
        "/apis/apps/v1/namespaces/default/daemonsets",
        json.dumps(ds),
        headers={"Content-Type": "application/json"},
    )
    assert code == 201
    assert headers["warning"] == '299 - "unknown field \\"spec.bogus\\""'
    assert "bogus" not in json.loads(data)["spec"]


def test_eviction_deletes_the_pod_with_201_success(store: Store, raw: Raw) -> None:
    put(store, PODS, pod("victim"))
    eviction: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "victim", "namespace": "default"},
    }
    code, body = raw.json("POST", "/api/v1/namespaces/default/pods/victim/eviction", eviction)
    assert code == 201 and body["status"] == "Success"
    # graceful, as a DELETE: no kubelet runs here to finish it, so the pod stays terminating
    [terminating] = store.list(PODS, namespace="default").items
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    eviction["deleteOptions"] = {"gracePeriodSeconds": 0}
    code, body = raw.json("POST", "/api/v1/namespaces/default/pods/victim/eviction", eviction)
    assert code == 201
    assert store.list(PODS, namespace="default").items == []
    code, body = raw.json("POST", "/api/v1/namespaces/default/pods/victim/eviction", eviction)
    assert code == 404 and _is_status(body, 404, "NotFound")


def test_status_subresource_of_a_pod(store: Store, raw: Raw) -> None:
    put(store, PODS, pod("p", phase="Pending", ready=False))
    code, body = raw.json(
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        {"status": {"phase": "Running"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert code == 200 and body["status"]["phase"] == "Running"
    assert raw.json("GET", "/api/v1/namespaces/default/pods/p/status")[1]["status"]["phase"] == "Running"


def test_namespace_status_path_addresses_the_namespace(raw: Raw) -> None:
    code, body = raw.json("GET", "/api/v1/namespaces/default/status")
    assert code == 200 and body["kind"] == "Namespace" and body["metadata"]["name"] == "default"


def test_delete_with_a_delete_options_body_and_preconditions(store: Store, raw: Raw) -> None:
    put(store, DAEMONSETS, daemonset("gone"))
    options = {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "not-the-uid"},
    }
    code, body = raw.json("DELETE", "/apis/apps/v1/namespaces/default/daemonsets/gone", options)
    assert code == 409 and _is_status(body, 409, "Conflict")
    options["preconditions"] = {}
    code, body = raw.json("DELETE", "/apis/apps/v1/namespaces/default/daemonsets/gone?dryRun=All", options)
    assert code == 200 and store.get(DAEMONSETS, "default", "gone")
    code, body = raw.json("DELETE", "/apis/apps/v1/namespaces/default/daemonsets/gone", options)
    assert code == 200 and body["metadata"]["name"] == "gone"
    assert raw.json("GET", "/apis/apps/v1/namespaces/default/daemonsets/gone")[0] == 404


def test_delete_collection_with_a_label_selector(store: Store, raw: Raw) -> None:
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        put(store, PODS, pod(name, labels={"app": app}))
    code, body = raw.json(
        "DELETE", "/api/v1/namespaces/default/pods?labelSelector=app%3Dx&gracePeriodSeconds=0"
    )
    assert code == 200 and sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "b"]
    assert [p["metadata"]["name"] for p in store.list(PODS, namespace="default").items] == ["c"]


def test_invalid_dry_run_value_is_400(raw: Raw) -> None:
    code, body = raw.json(
        "POST", "/api/v1/namespaces/default/configmaps?dryRun=Some", {"metadata": {"name": "x"}}
    )
    assert code == 400 and _is_status(body, 400, "BadRequest")


def _read_events(api: ApiServer, path: str, count: int) -> list[dict[str, Any]]:
    raw = Raw(api)
    conn = raw.connection()
    conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    events: list[dict[str, Any]] = []
    try:
        while len(events) < count:
            line = response.readline()
            if not line:
                break
            events.append(json.loads(line))
    finally:
        conn.close()
    return events


def test_watch_streams_newline_delimited_events(store: Store, api: ApiServer) -> None:
    put(store, NODES, node("gpu-1"))
    start = store.resource_version
    put(store, NODES, node("gpu-2"))
    events = _read_events(api, f"/api/v1/nodes?watch=1&resourceVersion={start}&timeoutSeconds=10", 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "gpu-2")]
    assert events[0]["object"]["kind"] == "Node"


def test_watch_ends_at_timeout_seconds(store: Store, api: ApiServer) -> None:
    events = _read_events(
        api, f"/api/v1/nodes?watch=true&resourceVersion={store.resource_version}&timeoutSeconds=1", 5
    )
    assert events == []  # the stream ended (terminating chunk) without events


def test_a_watch_that_allows_bookmarks_gets_one_before_its_timeout(store: Store, api: ApiServer) -> None:
    """Another kind changed meanwhile: the bookmark carries the store's resourceVersion, so the watcher
    resumes from it rather than from one the log may drop."""
    start = store.resource_version
    put(store, PODS, pod("exporter"))
    path = f"/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion={start}&timeoutSeconds=3"
    events = _read_events(api, path, 5)
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["object"]["kind"] == "Node"
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(store.resource_version)


def test_a_watch_that_does_not_allow_bookmarks_gets_none(store: Store, api: ApiServer) -> None:
    path = f"/api/v1/nodes?watch=1&resourceVersion={store.resource_version}&timeoutSeconds=3"
    assert _read_events(api, path, 5) == []


def test_watch_with_a_too_old_resource_version_sends_an_error_event(store: Store) -> None:
    small = Store(store.registry, event_log_size=2)
    server = ApiServer(small, token=TOKEN)
    server.start()
    try:
        for index in range(5):
            put(small, NODES, node(f"n{index}"))
        events = _read_events(server, "/api/v1/nodes?watch=1&resourceVersion=1", 2)
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        assert events[0]["object"]["code"] == 410 and events[0]["object"]["kind"] == "Status"
    finally:
        server.stop()
        small.close()


def test_stop_ends_an_open_watch_at_once(store: Store) -> None:
    server = ApiServer(store, token=TOKEN)
    server.start()
    raw = Raw(server)
    conn = raw.connection()
    conn.request("GET", "/api/v1/nodes?watch=1", headers={"Authorization": f"Bearer {TOKEN}"})
    response = conn.getresponse()
    assert response.status == 200
    stopped = threading.Event()

    def stop() -> None:
        server.stop()
        stopped.set()

    stopper = threading.Thread(target=stop)
    stopper.start()
    assert stopped.wait(timeout=10), "stop() did not end the watch"
    stopper.join()
    conn.close()


def test_pod_proxy_calls_the_proxy_with_pod_port_path_and_query(
    store: Store, raw: Raw, proxy_calls: ProxyCalls
) -> None:
    put(store, PODS, pod("exporter", port=9400))
    code, headers, body = raw.request(
        "GET", "/api/v1/namespaces/default/pods/exporter:9400/proxy/metrics?x=1"
    )
    assert code == 200 and headers["content-type"].startswith("text/plain")
    assert b'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="exporter"} 42' in body
    code, _, _ = raw.request("GET", "/api/v1/namespaces/default/pods/exporter/proxy/")
    assert proxy_calls.calls == [("exporter", 9400, "/metrics", "x=1"), ("exporter", 9400, "/", "")]


def test_pod_proxy_errors(store: Store, api: ApiServer, raw: Raw) -> None:
    code, body = raw.json("GET", "/api/v1/namespaces/default/pods/missing:9400/proxy/metrics")
    assert code == 404 and _is_status(body, 404, "NotFound")
    put(store, PODS, pod("pending", phase="Pending", ready=False, port=9400))
    code, body = raw.json("GET", "/api/v1/namespaces/default/pods/pending:9400/proxy/metrics")
    assert code == 503 and _is_status(body, 503, "ServiceUnavailable")
    put(store, PODS, pod("running", port=9400))
    api.proxy = None
    code, body = raw.json("GET", "/api/v1/namespaces/default/pods/running:9400/proxy/metrics")
    assert code == 503 and _is_status(body, 503, "ServiceUnavailable")


def test_pod_proxy_passes_on_an_api_error_from_the_proxy(store: Store, api: ApiServer, raw: Raw) -> None:
    from gpuplan.sim.api.store import ApiError

    def refusing(pod: dict[str, Any], port: int, path: str, query: str) -> tuple[int, str, bytes]:
        raise ApiError(503, "ServiceUnavailable", f"nothing listens on port {port}")

    put(store, PODS, pod("quiet", port=9400))
    api.proxy = refusing
    code, body = raw.json("GET", "/api/v1/namespaces/default/pods/quiet:9400/proxy/metrics")
    assert code == 503 and body["message"] == "nothing listens on port 9400"


def test_sim_paths_go_to_the_control_callable(raw: Raw, control_calls: ControlCalls) -> None:
    code, body = raw.json("POST", "/sim/faults/api", {"errorRate": 0.5})
    assert code == 200 and body == {"ok": True, "path": "/sim/faults/api"}
    assert control_calls.calls == [("POST", "/sim/faults/api", {"errorRate": 0.5})]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/livez", "/readyz/ping"])
def test_health_endpoints(raw: Raw, path: str) -> None:
    code, headers, body = raw.request("GET", path)
    assert code == 200 and body == b"ok" and headers["content-type"].startswith("text/plain")


def test_a_given_port_is_used(store: Store) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with ApiServer(store, token=TOKEN, port=free, tls=False) as server:
        assert server.port == free and server.url == f"http://127.0.0.1:{free}"


def test_eviction_answers_429_when_a_fault_says_so(store: Store, raw: Raw, api: ApiServer) -> None:
    put(store, PODS, pod("protected"))
    api.faults.update(error_rate=1.0, codes=[429], retry_after_seconds=5)
    code, headers, data = raw.request(
        "POST",
        "/api/v1/namespaces/default/pods/protected/eviction",
        json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "protected"}}),
        headers={"Content-Type": "application/json"},
    )
    assert code == 429 and headers["retry-after"] == "5" and json.loads(data)["reason"] == "TooManyRequests"
    assert store.get(PODS, "default", "protected")


def test_a_list_is_serialised_once_per_response(
    store: Store, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuplan.sim.api import protocol

    for index in range(30):
        put(store, NODES, node(f"n{index:02d}"))
    calls: list[Any] = []
    original = protocol.encode

    def counting(obj: Any, *, pretty: bool = False) -> bytes:
        calls.append(obj)
        return original(obj, pretty=pretty)

    monkeypatch.setattr(protocol, "encode", counting)
    code, body = raw.json("GET", "/api/v1/nodes?limit=20")
    assert code == 200 and len(body["items"]) == 20 and len(calls) == 1


def _raw_exchange(api: ApiServer, payload: bytes) -> bytes:
    context = ssl.create_default_context(cadata=api.ca_pem.decode())
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
        with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            tls.sendall(payload)
            chunks = []
            while chunk := tls.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "payload,code,reason",
    [
        (b"GARBAGE\r\n\r\n", 400, "BadRequest"),
        (b"TRACE /api HTTP/1.1\r\nHost: x\r\n\r\n", 405, "MethodNotAllowed"),
        (b"FOO /api HTTP/1.1\r\nHost: x\r\n\r\n", 405, "MethodNotAllowed"),
    ],
)
def test_malformed_requests_get_status_json_not_html(
    api: ApiServer, payload: bytes, code: int, reason: str
) -> None:
    answer = _raw_exchange(api, payload)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {code}".encode()) or head.startswith(f"HTTP/1.0 {code}".encode())
    assert b"<html" not in answer.lower() and _is_status(json.loads(body), code, reason)
    if code == 405:
        assert json.loads(body) == REAL_405


def test_a_watch_ends_when_its_client_goes_away(store: Store, api: ApiServer) -> None:
    import time

    before = threading.active_count()
    raw = Raw(api)
    conn = raw.connection()
    conn.request("GET", "/api/v1/nodes?watch=1", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200
    assert threading.active_count() == before + 1  # the connection's thread, serving the watch
    conn.close()
    deadline = time.monotonic() + 10
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a condition with a deadline: no event exposes a handler thread's end
    assert threading.active_count() == before


def test_stop_leaves_no_server_thread_behind(store: Store) -> None:
    server = ApiServer(store, token=TOKEN)
    server.start()
    raw = Raw(server)
    idle = raw.connection()  # a keep-alive connection the client never closes
    idle.request("GET", "/version", headers={"Authorization": f"Bearer {TOKEN}"})
    idle.getresponse().read()
    assert any(t.name.startswith("sim-apiserver") for t in threading.enumerate())
    server.stop()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("sim-apiserver")]
    idle.close()


def test_a_body_of_another_kind_is_a_type_mismatch_not_unknown_fields(raw: Raw) -> None:
    code, body = raw.json(
        "POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", daemonset("not-a-configmap")
    )
    assert code == 400 and "does not match the expected API version" in body["message"]


def test_a_watch_of_a_custom_kind_ends_when_its_crd_is_deleted(store: Store, api: ApiServer) -> None:
    crds = store.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    store.create(
        crds,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        },
        manager="test",
    )
    conn = Raw(api).connection()
    try:
        conn.request(
            "GET", "/apis/example.com/v1/widgets?watch=1", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        response = conn.getresponse()
        assert response.status == 200
        store.delete(crds, None, "widgets.example.com")
        assert response.read() == b""  # the chunked stream ended (a read timeout would raise instead)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("empty", "filled", "where"),
    [
        ({"data": {}}, {"data": {"k": "v"}}, ("data",)),
        ({"metadata": {"labels": {}}}, {"metadata": {"labels": {"app": "x"}}}, ("metadata", "labels")),
    ],
)
def test_an_apply_keeps_the_values_of_a_map_it_applied_empty_before(
    raw: Raw, empty: dict[str, Any], filled: dict[str, Any], where: tuple[str, ...]
) -> None:
    """One manager applies a map empty, then the same object with values in it: the values stay (the
    real server's prune keeps what the new apply owns below the map it applied empty)."""
    path = "/api/v1/namespaces/default/configmaps/c?fieldManager=gpuplan"
    headers = {"Content-Type": "application/apply-patch+yaml"}

    def apply(extra: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
        for key, value in extra.items():
            body[key] = {**body.get(key, {}), **value}
        code, _, payload = raw.request("PATCH", path, yaml.safe_dump(body), headers=headers)
        assert code in (200, 201), payload
        answer: dict[str, Any] = json.loads(payload)
        return answer

    apply(empty)
    answer = apply(filled)
    code, got = raw.json("GET", "/api/v1/namespaces/default/configmaps/c")
    value: Any = got
    for key in where:
        value = value[key]
    expected: Any = filled
    for key in where:
        expected = expected[key]
    assert code == 200 and value == expected
    assert answer == got
