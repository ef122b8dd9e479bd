"""Options several commands share, declared once so that they behave alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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
