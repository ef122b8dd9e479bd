"""Turn pydantic's validation errors on ``gpustack.yaml`` into one actionable :class:`ConfigError`.

The first problem in file order becomes the ``Error:`` line (``file:line:column: summary``); its detail names
the field path and lists any further problems with their positions; the hint says how to fix it: the
did-you-mean key (difflib against the valid keys of that section), the allowed values, or the expected format.

Called by :func:`gpuplan.planner.spec.model.parse_spec` only.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpuplan.errors import ConfigError
from gpuplan.modules.values import PATTERN_HELP
from gpuplan.planner.spec.yamlpos import Positions

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    where: str
    sort_key: tuple[int, int, int]
    field: str
    summary: str
    hint: str


def field_path(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def to_config_error(exc: ValidationError, positions: Positions, root: type[BaseModel]) -> ConfigError:
    problems = sorted(
        (_problem(error, positions, root) for error in exc.errors(include_url=False)),
        key=lambda p: p.sort_key,
    )
    first = problems[0]
    detail = [f"field: {first.field}"]
    detail += [f"also {p.where}: {p.summary} (field {p.field})" for p in problems[1:]]
    return ConfigError(first.summary, where=first.where, detail="\n".join(detail), hint=first.hint)


def _problem(error: ErrorDetails, positions: Positions, root: type[BaseModel]) -> Problem:
    loc: Loc = tuple(part for part in error["loc"] if not _is_internal(part))
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind == "spec_conflict":  # a rule between sections: point at the field it names
        loc = (*loc, *ctx.get("path", ()))
    name = str(loc[-1]) if loc else "spec"
    where_key = kind in ("extra_forbidden",)
    where = positions.where(loc, key=where_key)
    summary, hint = _describe(kind, error["msg"], ctx, value, name, loc, root)
    if kind == "string_type" and loc in positions.raw:
        hint = f'quote the value: {name}: "{positions.raw[loc]}"'  # 0.20 as written, not YAML's float 0.2
    line, column = (int(part) for part in where.rsplit(":", 2)[1:])
    # at one position, an unknown key explains a missing one (a typo), so it goes first
    priority = 0 if kind == "extra_forbidden" else 1
    return Problem(where, (line, column, priority), field_path(loc) or "(document)", summary, hint)


def _is_internal(part: str | int) -> bool:
    # pydantic adds validator tags such as "function-after[...]" to the loc of wrapped types
    return isinstance(part, str) and ("[" in part and part.endswith("]"))


def _describe(
    kind: str, msg: str, ctx: dict[str, Any], value: Any, name: str, loc: Loc, root: type[BaseModel]
) -> tuple[str, str]:
    if kind == "spec_conflict":
        return msg, str(ctx.get("hint", ""))
    if kind == "extra_forbidden":
        valid = allowed_keys(root, loc[:-1])
        return f"unknown field '{name}'", _did_you_mean(name, valid, "valid keys here")
    if kind == "missing":
        return f"missing required field '{name}'", f"add '{name}' to {field_path(loc[:-1]) or 'the document'}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        options = [
            option.strip(" '") for option in expected.replace(" or ", ",").split(",") if option.strip()
        ]
        guess = difflib.get_close_matches(str(value), options, n=1)
        hint = (f"did you mean '{guess[0]}'? " if guess else "") + f"allowed values: {expected}"
        return f"invalid value {_show(value)} for '{name}'", hint
    if kind == "version_format":
        return (
            f"invalid version {_show(value)} for '{name}'",
            f"expected {ctx.get('expected', 'a release tag')}",
        )
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        expected = PATTERN_HELP.get(pattern, f"a value matching {pattern}")
        return f"invalid value {_show(value)} for '{name}'", f"expected {expected}"
    if kind == "quantity_negative":
        return f"invalid value {_show(value)} for '{name}'", "expected a quantity of zero or more"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"'{name}' must be a mapping, not {_type_name(value)}", "write it as indented key: value lines"
    if kind in ("tuple_type", "list_type"):
        return f"'{name}' must be a list, not {_type_name(value)}", "write it as '- item' lines"
    if kind == "string_type":
        return (
            f"'{name}' must be a string, not {_type_name(value)}",
            f'quote the value: {name}: "{value}"' if value is not None else "give a quoted string",
        )
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"'{name}' must be a whole number, not {_show(value)}", "write a number without quotes, e.g. 4"
    if kind in ("bool_type", "bool_parsing"):
        return f"'{name}' must be true or false, not {_show(value)}", "write true or false without quotes"
    if kind.startswith(("greater_than", "less_than")) or kind.endswith(("_too_short", "_too_long")):
        return f"invalid value {_show(value)} for '{name}': {msg[0].lower()}{msg[1:]}", _range_hint(name)
    text = msg.removeprefix("Value error, ")
    return f"invalid '{name}': {text}", "see `gpuplan schema` for the expected shape"


def _range_hint(name: str) -> str:
    if name == "replicas":
        return "time-slicing and MPS share a GPU between at least 2 replicas; MPS allows at most 48"
    return "see `gpuplan schema` for the allowed range"


def _did_you_mean(word: str, options: Sequence[str], label: str) -> str:
    guess = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    listing = f"{label}: {', '.join(options)}" if options else ""
    return (f"did you mean '{guess[0]}'? " if guess else "") + listing


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _type_name(value: Any) -> str:
    names = {
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a mapping",
        type(None): "empty",
    }
    return names.get(type(value), type(value).__name__)


def allowed_keys(root: type[BaseModel], loc: Loc) -> list[str]:
    """The keys valid at ``loc`` (a path of YAML keys and list indices), following the model's fields."""
    current: Any = root
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = _model_in(current)
    if model is None:
        return []
    return [info.alias or name for name, info in model.model_fields.items()]


def _step(annotation: Any, part: str | int) -> Any:
    model = _model_in(annotation)
    if model is not None and isinstance(part, str):
        for name, info in model.model_fields.items():
            if (info.alias or name) == part:
                return info.annotation
        return None
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None) and arg is not Ellipsis]
    origin = typing.get_origin(annotation)
    if origin in (tuple, list) and args:
        return args[0]
    if origin in (dict, typing.Mapping) and len(args) == 2:  # noqa: UP006 - runtime origin check
        return args[1]
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class in ``annotation`` (itself, or the non-None member of an Optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None
