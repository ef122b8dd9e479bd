"""ANSI colours for human views: only on a terminal, never with ``--no-color`` (or NO_COLOR).

Views take a :class:`Palette` and call ``palette.green(text)``; a disabled palette returns the text unchanged,
so golden tests and pipes get plain text. Callers decide with :func:`for_stream`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


@dataclass(frozen=True)
class Palette:
    enabled: bool = False

    def paint(self, style: str, text: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\033[{_CODES[style]}m{text}\033[0m"

    def bold(self, text: str) -> str:
        return self.paint("bold", text)

    def dim(self, text: str) -> str:
        return self.paint("dim", text)

    def red(self, text: str) -> str:
        return self.paint("red", text)

    def green(self, text: str) -> str:
        return self.paint("green", text)

    def yellow(self, text: str) -> str:
        return self.paint("yellow", text)

    def cyan(self, text: str) -> str:
        return self.paint("cyan", text)


PLAIN = Palette(False)


def for_stream(stream: TextIO, *, allowed: bool) -> Palette:
    """Colours when ``allowed`` (no --no-color) and ``stream`` is a terminal."""
    isatty = getattr(stream, "isatty", None)
    return Palette(bool(allowed and callable(isatty) and isatty()))
