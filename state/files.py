"""Writing a whole file atomically: the state, its backup, saved plans and drift reports go through
:func:`write_atomically`.

A reader (or a crash at any moment, ``kill -9`` included) sees the old complete file or the new complete
file, never a partial one:

1. the bytes go to a temporary file in the target's folder (a rename across file systems is not atomic),
   created with mode 0600 (``os.open`` with the mode, so umask cannot widen it while it holds the data),
   flushed and fsynced;
2. a caller that wants another mode (a report a collector reads as another user) gets it before the rename;
3. ``os.replace`` puts it in place and the folder is fsynced, so the rename itself survives a power cut.

On any failure, an interruption included, the temporary file is removed and the old file is left as it was;
the OSError goes to the caller, which names the file and hints at the fix in its own words. The temporary
file's name carries the writer's pid (:func:`temp_pid`), so a file a killed writer left can be recognised and
removed later.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuplan.errors import StateError

TEMP_MARK = ".tmp."
PRIVATE = 0o600


def temp_path(target: Path) -> Path:
    """A fresh temporary name beside ``target``: hidden, with the writer's pid and a random part."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}.{uuid.uuid4().hex[:8]}")


def temp_pid(name: str, target_name: str) -> int | None:
    """The pid of the writer whose temporary file for ``target_name`` is called ``name``; None for any other
    file."""
    match = re.fullmatch(rf"\.{re.escape(target_name)}{re.escape(TEMP_MARK)}(\d+)\.[0-9a-f]+", name)
    return int(match.group(1)) if match else None


FOLDER_HINT = "pass --state a path in a folder you can write"


def ensure_folder(folder: Path, *, hints: Mapping[int, str] | None = None) -> None:
    """Create the state's folder (and its parents); a StateError naming it when that is refused, with the
    hint ``hints`` gives for the errno, else :data:`FOLDER_HINT`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        hint = (hints or {}).get(exc.errno or 0, FOLDER_HINT)
        raise StateError(
            f"cannot create the state's folder: {exc.strerror or exc}", where=str(folder), hint=hint
        ) from None


def write_atomically(target: Path, data: bytes | Iterable[bytes], *, mode: int = PRIVATE) -> None:
    """Replace ``target`` with ``data`` whole (see the module doc): bytes, or pieces written as they come
    (a large report need not be held as one); raises the OSError of the step that failed, with the old file
    intact and no temporary file left."""
    target = Path(target)
    temp = temp_path(target)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                handle.writelines(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode != PRIVATE:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    fsync_folder(target.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
