"""``drift report --format json``: the report document (design §4.1) as stable JSON.

Called by :mod:`gpuplan.commands.drift`. Keys in the document's order, two-space indent, a final newline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def render(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
