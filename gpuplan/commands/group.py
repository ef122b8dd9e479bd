"""The click group every ``gpuplan`` group is made of: a mistyped sub-command names the closest ones.

Here, not in :mod:`gpuplan.cli`, so that the command groups (a lower layer) can use it too.
"""

from __future__ import annotations

import click

SUGGESTIONS = 3  # close command names a usage error offers at most


class SuggestingGroup(click.Group):
    """A group whose "No such command" usage error says which command was probably meant, as difflib
    suggests a spec key (:mod:`gpuplan.planner.spec.problems`)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        unknown = name and not name.startswith("-") and self.get_command(ctx, name) is None
        if unknown and not ctx.resilient_parsing:
            ctx.fail(f"No such command '{name}'.{did_you_mean(name, self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)


def did_you_mean(word: str, options: list[str]) -> str:
    """`` Did you mean 'plan'?`` (or ``'start' or 'status'``), or nothing when no option is close."""
    import difflib  # a mistyped command needs it, not --help

    guesses = difflib.get_close_matches(word, options, n=SUGGESTIONS, cutoff=0.6)
    if not guesses:
        return ""
    quoted = [f"'{guess}'" for guess in guesses]
    listing = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" or {quoted[-1]}"
    return f" Did you mean {listing}?"
