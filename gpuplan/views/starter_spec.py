"""A starter ``gpustack.yaml`` (``gpuplan init --from-cluster``): the spec of design §3.1 with comments that
say what the cluster showed and which choice each component needs.

Node pools (design §7.1) are only ever a commented suggestion here: where host drivers differ, each group's
version as a pool keyed on GFD's driver label.
"""

from __future__ import annotations

import json
import re
import textwrap

from gpuplan.planner.observe.starter import Component, Starter

DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"


def render(starter: Starter, *, source: str) -> str:
    lines = [
        f"# A starter gpustack.yaml from {source} (gpuplan init --from-cluster).",
        "# Review every component below, then: gpuplan validate -f FILE && gpuplan plan -f FILE",
    ]
    if starter.gpu_summary:
        lines.append("# GPU nodes (GFD and NFD labels):")
        lines += [f"#   {line}" for line in starter.gpu_summary]
    else:
        lines.append("# No GPU node found (no GFD nor NFD label names an NVIDIA GPU).")
    lines += [
        "apiVersion: gpuplan.io/v1alpha1",
        "kind: GPUStack",
        "metadata:",
        f"  name: {starter.name}",
        "spec:",
        "  namespace: gpu-operator",
    ]
    for component in starter.components:
        lines += _section(component)
    if starter.drivers_differ:
        lines += _pools(starter)
    return "\n".join(lines) + "\n"


def _section(component: Component) -> list[str]:
    lines = [line for note in component.notes for line in _comment(note)]
    if component.owner == "gpuplan" and component.version is None:
        section = f"{component.name}: {{}}"
        lines.append(f"  {section:<18}# gpuplan's, at the default version (gpuplan plan shows it)")
        return lines
    lines += [f"  {component.name}:", f"    owner: {component.owner}"]
    if component.version:
        lines.append(f"    version: {json.dumps(component.version)}")
    return lines


def _comment(note: str) -> list[str]:
    """A note as comment lines of at most 110 columns; a command (indented 4 or more) is never broken."""
    indent = len(note) - len(note.lstrip(" "))
    if indent >= 4:
        return [f"  # {note}"]
    wrapped = textwrap.wrap(note.strip(), width=104 - indent, break_long_words=False, break_on_hyphens=False)
    pads = [" " * indent] + [" " * (indent + 2)] * len(wrapped)
    return [f"  # {pad}{line}" for pad, line in zip(pads, wrapped)]


def _pools(starter: Starter) -> list[str]:
    lines = ["  # nodePools:                     # one driver version per group of nodes (design §7.1)"]
    for group in starter.driver_groups:
        if not group.version:
            continue
        name = "driver-" + re.sub(r"[^a-z0-9]+", "-", group.version.lower()).strip("-")
        lines += [
            f"  #   - name: {name}",
            f"  #     nodeSelector: {{{DRIVER_LABEL}: {json.dumps(group.version)}}}",
            f"  #     driver: {{version: {json.dumps(group.version)}}}",
        ]
    return lines
