"""The lab's ``gpustack.yaml`` for the tests: one source for the stack of design §1 and its variants.

The full stack is the demo's (``gpuplan demo --print-spec`` prints it): ``LAB_SPEC`` is that very text, so a
test of the whole lab stack and the tour a user runs read the same file. Most tests need less: the lab's
header, the host's driver (580.105.08) and toolkit as external, then their own component sections; they
build it with ``lab_spec(devicePlugin="{owner: external}", ...)``, which keeps each test's difference in
sight at its call. ``full_lab_spec`` is the whole stack in that same flow style, for tests that change one
component of it; ``LAB_BLOCK_HEADER`` is the demo's own text up to its components.

pytest's importlib mode keeps tests/ off ``sys.path``; tests/conftest.py puts it there, so a test module
imports this one as ``from lab_stack import ...``. Imports only the demo command module, which loads neither
the simulator nor the engine.
"""

from __future__ import annotations

from gpuplan.commands.demo import SPEC as LAB_SPEC

__all__ = [
    "LAB_BLOCK_HEADER",
    "LAB_COMPONENTS",
    "LAB_HEADER",
    "LAB_SPEC",
    "STACK_HEADER",
    "full_lab_spec",
    "lab_spec",
]

STACK_HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
"""Up to ``spec:``, for tests that write every section themselves."""

HOST_SECTIONS = {"driver": '{owner: external, version: "580.105.08"}', "toolkit": "{owner: external}"}
"""The lab node's host driver and toolkit, which gpuplan only checks."""

LAB_COMPONENTS = {
    "devicePlugin": "{version: v0.20.1}",
    "gfd": "{version: v0.20.1}",
    "dcgmExporter": "{version: 4.6.0-4.8.3-distroless}",
    "validator": "{}",
}
"""What gpuplan runs in the demo's stack (``LAB_SPEC``), as flow sections."""


def _render(sections: dict[str, str | None]) -> str:
    return STACK_HEADER + "".join(
        f"  {key}: {value}\n" for key, value in sections.items() if value is not None
    )


def lab_spec(**sections: str | None) -> str:
    """The lab header with the host's driver and toolkit, then ``sections`` in the order given, each a YAML
    value on the section's line (``gfd="{owner: none}"``). A section named ``driver`` or ``toolkit``
    replaces the host's one in place; ``None`` leaves it out."""
    return _render({**HOST_SECTIONS, **sections})


def full_lab_spec(**changes: str | None) -> str:
    """The demo's whole stack (what ``LAB_SPEC`` says) with ``changes`` to its sections, as in
    ``lab_spec``."""
    return _render({**HOST_SECTIONS, **LAB_COMPONENTS, **changes})


LAB_HEADER = lab_spec()
"""The lab stack up to its components: tests append their own section lines to it."""

LAB_BLOCK_HEADER = LAB_SPEC[: LAB_SPEC.index("  devicePlugin:")]
"""The demo's stack up to its components (namespace, the host's driver and toolkit), in block style: no
braces, for tests that append sections through ``str.format``."""
