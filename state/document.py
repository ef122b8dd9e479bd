"""From bytes to a :class:`StateFile`: decode, parse, migrate, validate, and say exactly what is wrong.

Callers: :class:`gpuplan.state.local.LocalFileBackend` (the state file and its backup) and ``gpuplan state
push`` (a file the user hands over). Whatever is wrong with a file becomes one :class:`StateError` naming the
file, the line and column (JSON syntax) or the field path (structure), and a hint: never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from gpuplan.errors import StateError
from gpuplan.state import migrations
from gpuplan.state.model import StateFile

_MAX_DETAILS = 5


def parse_state(data: bytes | str, *, source: str, hint: str = "") -> StateFile:
    """The state in ``data`` (any known format), or a StateError about ``source`` carrying ``hint``."""
    try:
        return _parse(data, source=source)
    except StateError as exc:
        if not exc.hint:
            exc.hint = hint
        raise


def _parse(data: bytes | str, *, source: str) -> StateFile:
    text = _decode(data, source=source)
    if not text.strip():
        raise StateError(
            "the state file is empty",
            where=source,
            detail="gpuplan never writes an empty state (writes are atomic); it was truncated "
            "or created by something else.",
        )
    try:
        document = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise StateError(
            f"the state file is not valid JSON: {exc.msg}", where=f"{source}:{exc.lineno}:{exc.colno}"
        ) from None
    except _DuplicateKey as exc:
        raise StateError(f"the key {exc.key!r} appears twice in one object", where=source) from None
    except RecursionError:
        raise StateError(
            "the state file is nested too deeply to be a state",
            where=source,
            detail="gpuplan's own states nest a few dozen levels: this file was damaged or made by "
            "something else.",
        ) from None
    try:
        upgraded = migrations.upgrade(document, source=source)
        # Strict JSON validation: a serial of "5" or 5.0 is a damaged file, not something to coerce.
        return StateFile.model_validate_json(json.dumps(upgraded), strict=True)
    except ValidationError as exc:
        raise validation_error(exc, source=source) from None


def _decode(data: bytes | str, *, source: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateError(
            f"the state file is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})", where=source
        ) from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys silently; in a state file that hides a damaged or merged record.
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _DuplicateKey(key)
        document[key] = value
    return document


def field_path(location: tuple[int | str, ...]) -> str:
    """pydantic's error location as a readable path: ``resources["gfd/DaemonSet/ns/x"].uid``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "/" in part or "." in part or " " in part:
            path += f"[{json.dumps(part)}]"
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def validation_error(exc: ValidationError, *, source: str) -> StateError:
    """One StateError for a ValidationError: the first problem as the summary, the others as detail."""
    problems = [_describe(error) for error in exc.errors(include_url=False)]
    more = len(problems) - _MAX_DETAILS - 1
    detail = "\n".join(problems[1 : 1 + _MAX_DETAILS] + ([f"... and {more} more"] if more > 0 else []))
    return StateError(problems[0], where=source, detail=detail)


def _describe(error: Any) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        message = "field required"
    elif error["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{field_path(tuple(error['loc']))}: {message}"
