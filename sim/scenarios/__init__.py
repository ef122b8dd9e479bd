"""Built-in scenario files (a package only so that non-editable installs ship the YAML)."""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).parent


def names() -> list[str]:
    """The built-in scenarios' names: the YAML files here, so a new file is listed without another edit."""
    return sorted(path.stem for path in FOLDER.glob("*.yaml"))
