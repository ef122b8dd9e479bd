"""The kubelet's container logs: current and previous run, follow, and forgetting a removed pod."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from gpuplan.sim.kubelet import logs as logs_module
from gpuplan.sim.kubelet.logs import ContainerLogs


def texts(lines: list) -> list[str]:
    return [line.text for line in lines]


def test_a_restart_keeps_one_previous_run() -> None:
    logs = ContainerLogs()
    logs.write("u1", "c", "first run\nsecond line")
    logs.restart("u1", "c")
    logs.write("u1", "c", "second run")
    logs.restart("u1", "c")
    logs.write("u1", "c", "third run")
    assert texts(logs.read("u1", "c")) == ["third run"]
    assert texts(logs.read("u1", "c", previous=True)) == ["second run"]
    assert logs.has("u1", "c", previous=True)
    assert not logs.has("u1", "other")


def test_follow_yields_new_lines_until_the_run_finishes() -> None:
    logs = ContainerLogs()
    logs.write("u1", "c", "before")
    seen: list[str] = []
    reached = threading.Event()

    def follower() -> None:
        for line in logs.follow("u1", "c"):
            seen.append(line.text)
            reached.set()

    thread = threading.Thread(target=follower)
    thread.start()
    assert reached.wait(5)
    logs.write("u1", "c", "after")
    logs.finish("u1", "c")
    thread.join(5)
    assert not thread.is_alive()
    assert seen == ["before", "after"]


def test_follow_stops_when_asked_and_woken() -> None:
    logs = ContainerLogs()
    logs.write("u1", "c", "only")
    stop = threading.Event()
    seen: list[str] = []
    thread = threading.Thread(
        target=lambda: seen.extend(line.text for line in logs.follow("u1", "c", stop=stop))
    )
    thread.start()
    stop.set()
    logs.wake()
    thread.join(5)
    assert not thread.is_alive()
    assert seen == ["only"]


def test_forgetting_a_pod_drops_its_logs_and_ends_followers() -> None:
    logs = ContainerLogs()
    logs.write("u1", "c", "line")
    logs.forget("u1")
    assert logs.read("u1", "c") == []
    assert list(logs.follow("u1", "c")) == []


def test_a_follower_keeps_its_place_when_old_lines_rotate_away(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_module, "MAX_LINES_PER_RUN", 3)
    logs = ContainerLogs()
    logs.write("u1", "c", "a\nb")
    lines, cursor = logs.read_current("u1", "c")
    assert texts(lines) == ["a", "b"]
    logs.write("u1", "c", "c\nd\ne")  # a and b rotate away
    logs.finish("u1", "c")
    assert texts(list(logs.follow("u1", "c", cursor=cursor))) == ["c", "d", "e"]


def test_a_cursor_follows_its_own_run_even_after_a_restart() -> None:
    logs = ContainerLogs()
    logs.write("u1", "c", "first")
    _, cursor = logs.read_current("u1", "c")
    logs.write("u1", "c", "first, later")
    logs.restart("u1", "c")
    logs.write("u1", "c", "second run")
    assert texts(list(logs.follow("u1", "c", cursor=cursor))) == ["first, later"]


def test_the_lines_a_kubelet_remembers_printing_are_the_logs_own_strings(sim_factory: Any) -> None:
    sim = sim_factory("lab", serve=False)
    namespaces = sim.store.registry.for_kind("v1", "Namespace")
    sim.store.create(namespaces, {"metadata": {"name": "gpu-operator"}}, manager="test")
    daemonsets = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    for name in ("a", "b"):
        template = {
            "containers": [
                {"name": "ctr", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"}
            ]
        }
        body = {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template},
            },
        }
        sim.store.create(daemonsets, body, namespace="gpu-operator", manager="test")
    runs = sim.runtime.output._runs

    def printed() -> int:
        return sum(1 for pod in runs.values() if "ctr" in pod and pod["ctr"].printed)

    assert sim.wait_for(lambda: printed() == 2, 10)
    bodies = [body for pod in runs.values() for run in pod.values() for body in run.printed]
    assert bodies and all(sys.intern(body) is body for body in bodies)
    uid = next(iter(runs))
    sim.runtime.output.forget(uid)
    assert uid not in runs
