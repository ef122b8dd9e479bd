"""YAML loading that remembers where every key and value was written.

:func:`load` parses a document with PyYAML's safe loader, rejects duplicate mapping keys (PyYAML silently
keeps the last one, which hides typos), and returns the data with a :class:`Positions` index from a path such
as ``("spec", "devicePlugin", "version")`` to the line and column of the key and of its value. Syntax errors
become :class:`ConfigError` at the line and column the YAML parser reports.

Called by :mod:`gpuplan.planner.spec.model` to put ``file:line:column`` on every spec error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuplan.errors import ConfigError
from gpuplan.fileio import overgrown

Path = tuple[str | int, ...]
MAX_NODES = 100_000
"""Values a spec may expand to: a spec has a few hundred."""


@dataclass(frozen=True)
class Mark:
    line: int  # 1-based
    column: int  # 1-based

    @classmethod
    def of(cls, mark: yaml.Mark) -> Mark:
        return cls(mark.line + 1, mark.column + 1)


@dataclass
class Positions:
    """Where each path of a loaded document was written: the key's mark and the value's mark."""

    filename: str
    keys: dict[Path, Mark] = field(default_factory=dict)
    values: dict[Path, Mark] = field(default_factory=dict)
    raw: dict[Path, str] = field(default_factory=dict)
    """The scalar text as written (``0.20``, where the parsed value is the float 0.2)."""

    def where(self, path: Sequence[str | int], *, key: bool = False) -> str:
        """``file:line:column`` of the value at ``path`` (of its key with ``key=True``), or of its nearest
        recorded ancestor when the path does not exist in the file (a missing field is reported at its
        parent)."""
        table = self.keys if key else self.values
        current: Path = tuple(path)
        while current:
            if current in table:
                return self.at(table[current])
            if current in self.values:
                return self.at(self.values[current])
            current = current[:-1]
        return self.at(self.values.get((), Mark(1, 1)))

    def at(self, mark: Mark) -> str:
        return f"{self.filename}:{mark.line}:{mark.column}"


def load(text: str, *, filename: str) -> tuple[Any, Positions]:
    """Parse one YAML document; ``(None, positions)`` for an empty one."""
    try:
        loader = yaml.SafeLoader(text)  # checks the characters first: a control character is a ReaderError
    except yaml.reader.ReaderError as exc:
        raise ConfigError(
            f"invalid YAML: {exc.reason} (character {exc.character:#x})",
            where=f"{filename}:{_line_column(text, exc.position)}",
            hint="remove the control character; a spec is plain text",
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Positions(filename)
        check_size(node, filename=filename)
        positions = Positions(filename)
        _index(node, (), positions)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, filename) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(
            "the YAML document is nested too deeply", where=filename, hint="a stack spec nests a few levels"
        ) from None
    finally:
        loader.dispose()
    return data, positions


def _line_column(text: str, position: int) -> str:
    before = text[:position]
    return f"{before.count(chr(10)) + 1}:{position - (before.rfind(chr(10)) + 1) + 1}"


def check_size(root: yaml.Node, *, filename: str, limit: int = MAX_NODES) -> None:
    """Refuse a document whose aliases expand it beyond ``limit`` values
    (:func:`gpuplan.fileio.overgrown`)."""
    node = overgrown(root, limit)
    if node is not None:
        raise ConfigError(
            f"the YAML document expands to more than {limit} values",
            where=f"{filename}:{node.start_mark.line + 1}:{node.start_mark.column + 1}",
            detail="its aliases (*name) repeat anchored values so often that the document would not fit in "
            "memory",
            hint="write the values out, or use fewer nested aliases",
        )


def _syntax_error(exc: yaml.MarkedYAMLError, filename: str) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark is not None else filename
    problem = exc.problem or exc.context or "invalid YAML"
    hint = (
        "YAML indents with spaces only; replace the tab characters"
        if "\\t" in problem or "tab" in problem
        else "check the indentation and quoting around this position"
    )
    return ConfigError(f"invalid YAML: {problem}", where=where, hint=hint)


def _index(node: yaml.Node, path: Path, positions: Positions) -> None:
    positions.values[path] = Mark.of(node.start_mark)
    if isinstance(node, yaml.ScalarNode):
        positions.raw[path] = str(node.value)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, Mark] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            mark = Mark.of(key_node.start_mark)
            if key in seen:
                first = seen[key]
                raise ConfigError(
                    f"duplicate key '{key}'",
                    where=positions.at(mark),
                    detail=f"first defined at line {first.line}, column {first.column}",
                    hint="remove one of the two; YAML would silently keep only the last",
                )
            seen[key] = mark
            positions.keys[path + (key,)] = mark
            _index(value_node, path + (key,), positions)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            positions.keys[path + (index,)] = Mark.of(item.start_mark)
            _index(item, path + (index,), positions)
