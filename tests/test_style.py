"""The code keeps the project's style: ruff's lint rules and its formatter (pyproject.toml [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint_is_clean() -> None:
    proc = ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_leaves_every_file_as_it_is() -> None:
    proc = ruff("format", "--no-cache", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
