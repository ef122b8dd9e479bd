"""Reading a file a user handed gpuplan, safely: a regular file only, and never more than a set size.

A spec, state, saved plan or scenario path can be anything: a FIFO (reading blocks until someone writes), a
symlink to ``/dev/zero`` (reading never ends), a directory, a 200 MB file. :func:`read_bounded` opens without
blocking, checks what it opened (``fstat`` of the open descriptor, so the check cannot be raced by a rename),
refuses anything but a regular file, and reads at most ``limit`` bytes: one clear error in every case, and
never a hang. Importable from every layer (the simulator's scenario files use it too), like the error tree.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    import yaml

MiB = 1024 * 1024
SPEC_LIMIT = 4 * MiB
"""A stack spec: a few kilobytes in practice; 4 MiB leaves room for any node pool list."""
PLAN_LIMIT = 256 * MiB
"""A saved plan lists nodes per change and fingerprints per object: tens of MiB on a 10,000-node fleet."""
STATE_LIMIT = 256 * MiB
"""The state holds records per object and a short history: far below this on the largest fleets."""
SCENARIO_LIMIT = 64 * MiB


def read_bounded(
    path: str | Path, *, limit: int, what: str, error: type[GpuplanError] = GpuplanError
) -> bytes:
    """The bytes of the regular file ``path``; an ``error`` (the caller's kind: ConfigError for a spec,
    StateError for a state) naming ``what`` and the path when it cannot be read, is not a regular file, or
    holds more than ``limit`` bytes."""
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", where=name, hint=_hint(exc)) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind != "regular file":
            raise error(
                f"the {what} is a {kind}, not a regular file", where=name, hint="pass the path of a file"
            )
        data = _read_at_most(fd, limit + 1)
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", where=name) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(
            f"the {what} is larger than {limit // MiB} MiB",
            where=name,
            hint=f"a {what} gpuplan writes or reads is far smaller: check that this is the right file",
        )
    return data


def read_text_bounded(
    path: str | Path, *, limit: int, what: str, error: type[GpuplanError] = GpuplanError
) -> str:
    """:func:`read_bounded` decoded as UTF-8 (an error names the first byte that is not)."""
    data = read_bounded(path, limit=limit, what=what, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"the {what} is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})", where=str(path)
        ) from None


def _read_at_most(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "named pipe (FIFO)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def _hint(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "check the path"
    if isinstance(exc, PermissionError):
        return "check the file's permissions"
    return ""


def overgrown(root: yaml.Node, limit: int) -> yaml.Node | None:
    """The first node at which a composed YAML document expands beyond ``limit`` values, or None.

    Aliases (``*name``) share one composed node, so a few hundred bytes ("billion laughs": nine aliases to
    nine aliases to ...) can stand for 10^9 values, which any walk over the document (positions, validation)
    would visit one by one. Each node's expanded size is computed once here, without recursion, so the
    check is linear in the document as written."""

    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if expanded or not children:
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[id(node)] > limit:
                return node
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
