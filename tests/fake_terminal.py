"""A terminal stream for tests of the live display: it keeps the screen as a terminal would, from the text
and the few ANSI controls the display writes (cursor up, carriage return, clear to end of line, clear below;
colours are dropped), and records the widest row ever written, to show no line wrapped."""

from __future__ import annotations

import io
import re

_CONTROL = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])")


class FakeTerminal(io.StringIO):
    """Rows of text with a cursor; ``rows`` is the scrollback and the screen together."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = [""]
        self.row = 0
        self.col = 0
        self.widest = 0

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        super().write(text)
        at = 0
        for match in _CONTROL.finditer(text):
            self._text(text[at : match.start()])
            self._control(match.group(1), match.group(2))
            at = match.end()
        self._text(text[at:])
        return len(text)

    def _text(self, text: str) -> None:
        for char in text:
            if char == "\n":
                self.row, self.col = self.row + 1, 0
                if self.row == len(self.rows):
                    self.rows.append("")
            elif char == "\r":
                self.col = 0
            else:
                line = self.rows[self.row].ljust(self.col)
                self.rows[self.row] = line[: self.col] + char + line[self.col + 1 :]
                self.col += 1
                self.widest = max(self.widest, self.col)

    def _control(self, argument: str, code: str) -> None:
        if code == "A":
            self.row = max(0, self.row - int(argument or 1))
        elif code == "K":
            self.rows[self.row] = self.rows[self.row][: self.col]
        elif code == "J":
            self.rows[self.row] = self.rows[self.row][: self.col]
            del self.rows[self.row + 1 :]
        elif code != "m":
            raise AssertionError(f"the display wrote a control the test terminal does not know: {code}")

    @property
    def lines(self) -> list[str]:
        """What the terminal shows, top to bottom, without the empty row under the cursor."""
        return self.rows[:-1] if self.rows and self.rows[-1] == "" else list(self.rows)
