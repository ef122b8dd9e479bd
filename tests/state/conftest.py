"""Fixtures for the state layer's tests: records that look like what the apply engine writes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuplan.state.model import ResourceRecord, make_address

RecordFactory = Callable[..., ResourceRecord]


@pytest.fixture
def make_record() -> RecordFactory:
    """A DaemonSet record in gpu-operator by default; keyword arguments override any field."""

    def build(
        name: str = "nvidia-device-plugin-daemonset",
        *,
        component: str = "devicePlugin",
        kind: str = "DaemonSet",
        namespace: str | None = "gpu-operator",
        api_version: str = "apps/v1",
        owned: dict[str, Any] | None = None,
        **fields: Any,
    ) -> ResourceRecord:
        return ResourceRecord(
            address=make_address(component, kind, namespace, name),
            component=component,
            api_version=api_version,
            kind=kind,
            namespace=namespace,
            name=name,
            owned=owned
            if owned is not None
            else {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": name, "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}
                            ]
                        }
                    }
                }
            },
            **{"applied_serial": 1, **fields},
        )

    return build


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: any mode narrower than 0666 must then come from gpuplan itself."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)
