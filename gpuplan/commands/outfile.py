"""A file a command generates (a scenario snapshot, a starter spec): printed, or written whole and new.

``-o PATH`` refuses a file that exists unless ``--force`` (a hand-edited spec is never overwritten by
accident), and writes through :func:`gpuplan.state.files.write_atomically` (mode 0644: the files are meant
to be read and shared), so a failure leaves nothing behind; every OS error is one ``Error:`` line naming the
file, with a hint by errno.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import click

from gpuplan import errors

_HINTS = {
    errno.ENOENT: "the folder does not exist: create it, or pass -o a path in an existing folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder: pass -o a path in an existing folder",
    errno.EACCES: "the user running gpuplan may not write there: check the folder's owner and mode",
    errno.EPERM: "the user running gpuplan may not write there: check the folder's owner and mode",
    errno.EROFS: "the file system is read-only: write the file elsewhere",
    errno.ENOSPC: "the disk is full: free space, or write the file elsewhere",
    errno.EISDIR: "the path is a folder: pass -o a file name",
}


def check_writable(path: Path | None, *, force: bool, what: str) -> None:
    """Refuse before any cluster read: a folder at the path or a missing folder above it, an existing
    file without ``--force``."""
    if path is None:
        return
    if path.is_dir():
        raise errors.GpuplanError(
            f"cannot write the {what}: it is a folder", where=str(path), hint=_HINTS[errno.EISDIR]
        )
    if not path.parent.is_dir():
        reason = errno.ENOTDIR if path.parent.exists() else errno.ENOENT
        raise errors.GpuplanError(
            f"cannot write the {what}: {os.strerror(reason)}", where=str(path), hint=_HINTS[reason]
        )
    if os.path.lexists(path) and not force:
        raise errors.GpuplanError(
            f"the {what} exists already",
            where=str(path),
            hint="pass --force to replace it, or another -o path",
        )


def emit(path: Path | None, text: str, *, what: str) -> None:
    """``text`` to stdout, or replacing ``path`` whole."""
    if path is None:
        click.echo(text, nl=False)
        return
    from gpuplan.state import files

    try:
        files.write_atomically(path, text.encode("utf-8"), mode=0o644)
    except OSError as exc:
        hint = _HINTS.get(exc.errno or 0, "check the path given to -o and the space left there")
        raise errors.GpuplanError(
            f"cannot write the {what}: {exc.strerror or exc}", where=str(path), hint=hint
        ) from None
