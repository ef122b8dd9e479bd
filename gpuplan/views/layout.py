"""Fitting human views to the terminal: its width, and long lines wrapped at spaces with a hanging indent.

Wrapping counts only what the terminal shows, so a line painted by :class:`~gpuplan.views.colour.Palette`
wraps where the plain line does (the escape codes stay with their words). A word longer than the width (an
image reference, an address) is never broken.
"""

from __future__ import annotations

import re
import shutil

DEFAULT_WIDTH = 100  # when stdout is not a terminal: a pipe, a file, a CI log
NARROWEST = 60  # below this a wrapped plan is harder to read than a long line

_ESCAPE = re.compile(r"\033\[[0-9;]*m")
_WORD = re.compile(r"( *)([^ ]+)")


def terminal_width() -> int:
    """The columns of the terminal stdout is on ($COLUMNS first), else :data:`DEFAULT_WIDTH`."""
    return max(NARROWEST, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def visible_len(text: str) -> int:
    return len(_ESCAPE.sub("", text))


def wrap(line: str, width: int, *, hang: int | None = None) -> list[str]:
    """``line`` as lines of at most ``width`` visible columns. Continuation lines are indented by ``hang``
    columns; by default two more than the line's own indent (under the text after a ``#`` or ``!`` marker), or
    none for a paragraph that starts in the first column."""
    if visible_len(line) <= width:
        return [line]
    shown = _ESCAPE.sub("", line)
    lead = len(shown) - len(shown.lstrip(" "))
    indent = " " * (hang if hang is not None else (lead + 2 if lead else 0))
    lines: list[str] = []
    current = ""
    for spaces, word in _WORD.findall(line):  # an escape code is a word of no width: never a break
        if (
            visible_len(word)
            and _ESCAPE.sub("", current).strip()
            and visible_len(current + spaces + word) > width
        ):
            lines.append(current)
            current = indent + word
        else:
            current += spaces + word
    lines.append(current)
    return lines


def fit(text: str, width: int) -> str:
    """Every line of ``text`` wrapped to ``width`` with the default hanging indent."""
    return "\n".join(part for line in text.split("\n") for part in wrap(line, width))
