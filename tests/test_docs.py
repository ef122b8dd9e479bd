"""The repository explains itself: every link in the README and docs/ resolves inside the repository, and
no file speaks of anything a user's clone does not have (a folder beside it, the tracker's numbers)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
OUTSIDE = re.compile(r"\.\./shared|\b[Ii]ssue \d|\bhelper M\d")


def tracked(*patterns: str) -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / name for name in names.stdout.split()]


def test_markdown_links_resolve_inside_the_repository() -> None:
    broken = []
    for page in tracked("*.md"):
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.exists() or ROOT not in resolved.parents:
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_nothing_points_outside_the_clone() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tracked("*.py", "*.md", "*.toml", ".ci/*")
        if path.is_file()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []
