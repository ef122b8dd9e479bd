"""The ``gpustack.yaml`` of ``gpuplan init --from-clusterpolicy``: the translated spec, under comments that
name its source, every setting not carried over, and the choices made (NVIDIADriver CRs become
``spec.nodePools``)."""

from __future__ import annotations

import textwrap

import yaml

from gpuplan.planner.observe.clusterpolicy import Translation


def render(translation: Translation, *, source: str) -> str:
    lines = [
        f"# The gpustack.yaml equivalent to {source} (gpuplan init --from-clusterpolicy).",
        "# Check it: gpuplan validate -f FILE && gpuplan plan -f FILE (it names what the operator runs)",
    ]
    if translation.not_carried:
        lines.append("# not carried over (gpuplan has no equivalent):")
        lines += [f"#   {line}" for item in translation.not_carried for line in _wrap(item)]
    lines += [f"# {line}" for note in translation.notes for line in _wrap(note)]
    lines.append(yaml.safe_dump(translation.document, sort_keys=False, width=100).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, width=104, break_long_words=False, subsequent_indent="  ") or [""]
