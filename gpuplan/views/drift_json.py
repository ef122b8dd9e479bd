"""``drift report --format json``: the report document (design §4.1) as stable JSON.

Called by :mod:`gpuplan.commands.drift`. Keys in the document's order, two-space indent, a final newline.
:func:`pieces` gives the text as it is encoded, so a fleet's report (19 MB at 5,000 nodes) is written out
without being held as one string: encoded whole with an indent, its text took five times its size in
fragments first (the indented encoder is the pure-Python one, which joins a list of every token).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

PIECE_CHARS = 64 * 1024
"""About how much text each of :func:`pieces` holds."""


def render(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def pieces(document: Mapping[str, Any]) -> Iterator[str]:
    """:func:`render`'s text in pieces of about :data:`PIECE_CHARS` characters, each made as it is needed."""
    pending: list[str] = []
    size = 0
    for token in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(document):
        pending.append(token)
        size += len(token)
        if size >= PIECE_CHARS:
            yield "".join(pending)
            pending, size = [], 0
    pending.append("\n")
    yield "".join(pending)
