"""Options several commands share, declared once so that they behave alike."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuplan import errors

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_SPEC = Path("gpustack.yaml")  # looked for in the working directory, as terraform looks for *.tf


def spec_option(help: str = "The stack spec (gpustack.yaml).", *, required: bool = True) -> Callable[[F], F]:
    """``-f/--file SPEC``, passed as ``spec_file``: ``./gpustack.yaml`` when not given and that file exists.
    Without either, a required spec is one usage error with a hint; an optional one is None."""

    def default_spec(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        if value is not None or ctx.resilient_parsing:
            return value
        if DEFAULT_SPEC.is_file():
            return DEFAULT_SPEC
        if not required:
            return None
        raise errors.UsageError(
            f"no stack spec: -f was not given and there is no {DEFAULT_SPEC} in the current directory",
            hint=f"pass -f SPEC, or create {DEFAULT_SPEC} here",
        )

    return click.option(
        "-f",
        "--file",
        "spec_file",
        type=click.Path(path_type=Path),
        callback=default_spec,
        help=f"{help} Default: ./{DEFAULT_SPEC} when it exists.",
    )


if TYPE_CHECKING:  # generic for type checkers; older click releases are not subscriptable at run time
    _FloatParam = click.ParamType[float]
else:
    _FloatParam = click.ParamType


class Duration(_FloatParam):
    """``30s``, ``5m``, ``1m30s``, ``1.5s`` or plain seconds (``0``), as Terraform's ``-lock-timeout``."""

    name = "duration"
    _PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
    _UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        text = str(value).strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            return float(text)
        parts = self._PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            self.fail(f"{value!r} is not a duration (for example 30s, 5m, 1m30s)", param, ctx)
        return sum(float(number) * self._UNITS[unit] for number, unit in parts)


def lock_timeout_option() -> Callable[[F], F]:
    """``--lock-timeout DURATION``, passed as ``lock_timeout`` (seconds): how long to wait for a state lock
    another run holds before refusing (0: refuse at once)."""
    return click.option(
        "--lock-timeout",
        "lock_timeout",
        type=Duration(),
        default="0s",
        show_default=True,
        help="How long to wait for the state lock another run holds (30s, 5m); 0 refuses at once.",
    )
