"""Tables: the cells kubectl prints come from the server, computed as the apiserver's printers do."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from server_kit import NODES, TOKEN, Raw, node, pod, put

from gpuplan.sim.api import tables
from gpuplan.sim.api.server import ApiServer
from gpuplan.sim.api.store import Store

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def _ago(seconds: int) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(plural: str, obj: dict[str, Any], group: str = "") -> list[Any]:
    cells: list[Any] = tables.table(group, plural, [obj], now=NOW)["rows"][0]["cells"]
    return cells


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (600, "10m"),
        (3 * 3600 + 240, "3h4m"),
        (9 * 3600, "9h"),
        (2 * 86400 + 3 * 3600, "2d3h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400 + 5 * 86400, "3y5d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_matches_kubectl(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_wants_table_reads_the_accept_header_kubectl_sends() -> None:
    assert tables.wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;"
        "v=v1beta1;g=meta.k8s.io,application/json"
    )
    assert not tables.wants_table("application/json")
    assert not tables.wants_table(None)


def _with_statuses(
    obj: dict[str, Any], containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    obj["status"]["containerStatuses"] = containers
    if init is not None:
        obj["spec"]["initContainers"] = [{"name": s["name"], "image": "i"} for s in init]
        obj["status"]["initContainerStatuses"] = init
    return obj


def _status(
    state: dict[str, Any],
    ready: bool = False,
    restarts: int = 0,
    name: str = "main",
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    status = {"name": name, "ready": ready, "restartCount": restarts, "state": state}
    if last:
        status["lastState"] = last
    return status


def test_pod_status_running_ready_and_wide_cells() -> None:
    cells = _row("pods", pod("p", ip="10.1.2.3", node_name="gpu-7"))
    assert cells[1:4] == ["1/1", "Running", "0"] and cells[5:] == ["10.1.2.3", "gpu-7", "<none>", "<none>"]


@pytest.mark.parametrize(
    "state,reason",
    [
        ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
        ({"waiting": {"reason": "CrashLoopBackOff"}}, "CrashLoopBackOff"),
        ({"waiting": {"reason": "ImagePullBackOff"}}, "ImagePullBackOff"),
        ({"waiting": {"reason": "ErrImagePull"}}, "ErrImagePull"),
        ({"terminated": {"reason": "Completed", "exitCode": 0}}, "Completed"),
        ({"terminated": {"exitCode": 3}}, "ExitCode:3"),
    ],
)
def test_pod_status_reason_from_the_container_state(state: dict[str, Any], reason: str) -> None:
    obj = _with_statuses(pod("p", ready=False), [_status(state)])
    assert _row("pods", obj)[1:3] == ["0/1", reason]


def test_pod_status_while_init_containers_run() -> None:
    done = _status({"terminated": {"exitCode": 0, "reason": "Completed"}}, name="init-a")
    running = _status({"running": {}}, name="init-b")
    waiting_main = _status({"waiting": {"reason": "PodInitializing"}})
    obj = _with_statuses(pod("p", phase="Pending", ready=False), [waiting_main], init=[done, running])
    assert _row("pods", obj)[2] == "Init:1/2"
    crashing = _status({"waiting": {"reason": "CrashLoopBackOff"}}, name="init-b", restarts=4)
    obj = _with_statuses(pod("p", phase="Pending", ready=False), [waiting_main], init=[done, crashing])
    assert _row("pods", obj)[2:4] == ["Init:CrashLoopBackOff", "4"]
    finished = _status({"terminated": {"exitCode": 0, "reason": "Completed"}}, name="init-b")
    obj = _with_statuses(pod("p", phase="Pending", ready=False), [waiting_main], init=[done, finished])
    assert _row("pods", obj)[2] == "PodInitializing"


def test_pod_restarts_show_when_the_last_one_was() -> None:
    state = _status(
        {"running": {}}, ready=True, restarts=3, last={"terminated": {"exitCode": 1, "finishedAt": _ago(12)}}
    )
    assert _row("pods", _with_statuses(pod("p"), [state]))[3] == "3 (12s ago)"


def test_pod_being_deleted_is_terminating() -> None:
    obj = pod("p")
    obj["metadata"]["deletionTimestamp"] = _ago(1)
    assert _row("pods", obj)[2] == "Terminating"


def test_node_cells() -> None:
    cordoned = node(
        "n",
        unschedulable=True,
        labels={"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/gpu": ""},
    )
    cordoned["metadata"]["creationTimestamp"] = _ago(182)
    assert _row("nodes", cordoned)[:5] == [
        "n",
        "Ready,SchedulingDisabled",
        "control-plane,gpu",
        "3m2s",
        "v1.37.1",
    ]
    assert _row("nodes", node("m", ready=False))[1:3] == ["NotReady", "<none>"]
    unknown = node("u")
    unknown["status"]["conditions"] = []
    assert _row("nodes", unknown)[1] == "Unknown"
    assert _row("nodes", node("w"))[5:] == [
        "10.0.0.1",
        "<none>",
        "Ubuntu 24.04.1 LTS",
        "6.8.0-101-generic (amd64)",
        "containerd://2.1.4",
    ]


def test_node_kernel_cell_carries_the_architecture_as_print_node_builds_it() -> None:
    """printNode: the kernel version, "<unknown>" when empty, then " (<architecture>)" when one is known."""
    bare = node("b")
    del bare["status"]["nodeInfo"]["architecture"]
    assert _row("nodes", bare)[8] == "6.8.0-101-generic"
    blank = node("k")
    blank["status"]["nodeInfo"]["kernelVersion"] = ""
    assert _row("nodes", blank)[8] == "<unknown> (amd64)"
    arm = node("a")
    arm["status"]["nodeInfo"]["architecture"] = "arm64"
    assert _row("nodes", arm)[8] == "6.8.0-101-generic (arm64)"


def test_daemonset_cells() -> None:
    ds = {
        "metadata": {"name": "dp", "creationTimestamp": _ago(5)},
        "spec": {
            "selector": {
                "matchLabels": {"name": "dp"},
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["b", "a"]}],
            },
            "template": {
                "spec": {
                    "nodeSelector": {"z": "1", "a": "2"},
                    "containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}],
                }
            },
        },
        "status": {
            "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3,
            "numberReady": 2,
            "updatedNumberScheduled": 1,
            "numberAvailable": 2,
        },
    }
    assert _row("daemonsets", ds, group="apps") == [
        "dp",
        3,
        3,
        2,
        1,
        2,
        "a=2,z=1",
        "5s",
        "c1,c2",
        "i1,i2",
        "app in (a,b),name=dp",
    ]


def test_other_kinds_get_name_and_age() -> None:
    table = tables.table("rbac.authorization.k8s.io", "roles", [{"metadata": {"name": "r"}}], now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"] == ["r", "<unknown>"]


def test_table_shape_and_include_object() -> None:
    obj = node("n", labels={"a": "b"})
    obj["metadata"]["managedFields"] = [{"manager": "x"}]
    table = tables.table(
        "", "nodes", [obj], list_metadata={"resourceVersion": "9", "continue": "abc"}, now=NOW
    )
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "9", "continue": "abc"}
    assert {c["name"]: c["priority"] for c in table["columnDefinitions"]}["Internal-IP"] == 1
    embedded = table["rows"][0]["object"]
    assert embedded["kind"] == "PartialObjectMetadata" and embedded["metadata"]["labels"]["a"] == "b"
    assert "managedFields" not in embedded["metadata"]
    assert (
        tables.table("", "nodes", [obj], include_object="Object", now=NOW)["rows"][0]["object"]["kind"]
        == "Node"
    )
    assert "object" not in tables.table("", "nodes", [obj], include_object="None", now=NOW)["rows"][0]
    assert "columnDefinitions" not in tables.table("", "nodes", [obj], include_columns=False, now=NOW)


TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def test_server_answers_tables_for_lists_and_single_objects(raw: Raw, store: Store) -> None:
    for index in range(3):
        put(store, NODES, node(f"gpu-{index}"))
    code, table = raw.json(
        "GET", "/api/v1/nodes?limit=2&includeObject=Object", headers={"Accept": TABLE_ACCEPT}
    )
    assert code == 200 and table["kind"] == "Table" and len(table["rows"]) == 2
    assert table["metadata"]["continue"] and table["metadata"]["resourceVersion"]
    assert table["rows"][0]["object"]["kind"] == "Node"
    code, single = raw.json("GET", "/api/v1/nodes/gpu-2", headers={"Accept": TABLE_ACCEPT})
    assert [row["cells"][0] for row in single["rows"]] == ["gpu-2"]
    assert raw.json("GET", "/api/v1/nodes?includeObject=All", headers={"Accept": TABLE_ACCEPT})[0] == 400


def test_watch_tables_send_the_columns_once(raw: Raw, store: Store, api: ApiServer) -> None:
    start = store.resource_version
    put(store, NODES, node("a"))
    put(store, NODES, node("b"))
    conn = raw.connection()
    conn.request(
        "GET",
        f"/api/v1/nodes?watch=1&resourceVersion={start}&timeoutSeconds=5",
        headers={"Authorization": f"Bearer {TOKEN}", "Accept": TABLE_ACCEPT},
    )
    response = conn.getresponse()
    events = [json.loads(response.readline()) for _ in range(2)]
    conn.close()
    assert [e["object"]["rows"][0]["cells"][0] for e in events] == ["a", "b"]
    assert "columnDefinitions" in events[0]["object"] and "columnDefinitions" not in events[1]["object"]


def test_runtimeclass_cells_show_the_handler() -> None:
    """`kubectl get runtimeclass` prints NAME HANDLER AGE, as the apiserver's printer gives them."""
    rc = {"metadata": {"name": "nvidia", "creationTimestamp": _ago(60)}, "handler": "nvidia"}
    table = tables.table("node.k8s.io", "runtimeclasses", [rc], now=NOW)
    assert [column["name"] for column in table["columnDefinitions"]] == ["Name", "Handler", "Age"]
    assert table["rows"][0]["cells"] == ["nvidia", "nvidia", "60s"]
