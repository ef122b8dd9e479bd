"""The ``gpuplan`` namespace laid out on disk as it is installed, for tools that read folders, not imports.

setup.py maps the top-level folders into the namespace (planner/ -> gpuplan.planner, ...), which the editable
install implements with an import hook. Tools that walk the source tree (import-linter) or resolve imports
themselves (mypy) do not see that hook: import-linter finds no ``gpuplan.planner`` at all, and mypy types
every ``gpuplan.*`` import as Any, so cross-module errors go unreported. Copying the folders into one real
``gpuplan/`` package gives both tools the layout users get from a wheel.

Callers: tests/test_architecture.py (import-linter) and tests/test_typing.py (mypy --strict). pytest runs
in importlib mode, which keeps tests/ off sys.path, so each of them puts this folder on sys.path before
importing this module (tests/conftest.py, the one shared place, is not theirs to edit).
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("planner", "providers", "modules", "state", "sim")
"""The folders setup.py maps to ``gpuplan.<folder>``; gpuplan/ itself is the namespace's root package."""


def copy_installed_layout(into: Path) -> Path:
    """``into``/gpuplan holding gpuplan/ with each mapped folder inside it; returns ``into`` (the folder to
    put on PYTHONPATH or run the tool in). Files keep their modification times (copy2), so a mypy cache
    from an earlier copy stays valid for the files that did not change."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "gpuplan", into / "gpuplan", ignore=ignore)
    for folder in MAPPED:
        shutil.copytree(ROOT / folder, into / "gpuplan" / folder, ignore=ignore)
    return into
