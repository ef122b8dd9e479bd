"""Helpers of the module tests: render a spec text and look objects up by address."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from gpuplan.modules.base import DesiredObject
from gpuplan.planner.spec import model as spec

HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"


class Rendered:
    """The objects of one spec, by address text."""

    def __init__(self, body: str, **context: Any) -> None:
        self.spec = spec.parse_spec(HEADER + (body or "  {}\n"), filename="gpustack.yaml")
        self.context = self.spec.context(**context)
        self.objects: tuple[DesiredObject, ...] = self.spec.desired_objects(self.context)
        self.by_address: dict[str, DesiredObject] = {str(o.address): o for o in self.objects}

    def __getitem__(self, address: str) -> Mapping[str, Any]:
        return self.by_address[address].manifest

    def daemonset(self, component: str, name: str) -> Mapping[str, Any]:
        return self[f"{component}/DaemonSet/{self.context.namespace}/{name}"]

    def addresses(self) -> list[str]:
        return [str(o.address) for o in self.objects]


RenderFactory = Callable[..., Rendered]


@pytest.fixture
def render() -> RenderFactory:
    return Rendered
