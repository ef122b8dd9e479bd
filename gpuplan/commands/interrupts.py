"""Ctrl-C while a command only reads: one ``Error:`` line that says nothing was changed, and exit 130.

Python turns SIGINT into KeyboardInterrupt wherever the main thread is, most often deep in a request to a slow
API server. Left alone it reaches click, which prints a bare "Aborted." and exits 1. The phases that change
nothing (making a plan, reading the cluster) say so instead; any other phase ends with the CLI's own
"interrupted" line (:mod:`gpuplan.cli`), and apply's walk undoes what it changed first (its walker catches
the interrupt itself).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpuplan import errors

PLANNING = "planning"
READING = "reading the cluster"


@contextlib.contextmanager
def nothing_changed(doing: str) -> Iterator[None]:
    """Ctrl-C inside the block is :class:`~gpuplan.errors.Interrupted`: ``interrupted while <doing>; nothing
    was changed``."""
    try:
        yield
    except KeyboardInterrupt:
        raise errors.Interrupted(f"interrupted while {doing}; nothing was changed") from None
