"""The whole ``gpuplan`` package passes ``mypy --strict``, checked as it is installed.

Under the editable install mypy cannot follow setuptools' folder mapping (planner/ -> gpuplan.planner): it
types every ``gpuplan.*`` import as Any, so a wrong call into another module goes unreported. The test
copies the namespace into one real package (tests/installed_layout.py) and runs mypy there, with the
options of pyproject.toml's [tool.mypy].

mypy keeps its cache in pytest's cache folder (.pytest_cache/d/), so a run after a small edit rechecks only
what the edit affects; the copies keep their files' modification times, which is what lets the cache from
an earlier temporary folder apply. The file cache (not SQLite) is used because its writes are atomic
renames, safe when two test runs share the folder.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:  # importlib mode keeps tests/ off sys.path
    sys.path.insert(0, str(Path(__file__).parent))

from installed_layout import ROOT, copy_installed_layout  # noqa: E402

MYPY_TIMEOUT_S = 240
"""A cold run over the package takes ~20 s on one core; well past that, mypy is stuck, not slow."""


def _run_mypy(tree: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed in this environment: it belongs in pyproject.toml's test extras")
    env = {name: value for name, value in os.environ.items() if name != "MYPYPATH"}
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(cache_dir),
        "--no-sqlite-cache",
        "-p",
        "gpuplan",
    ]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=MYPY_TIMEOUT_S)


@pytest.fixture(scope="session")
def mypy_cache(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's cache folder when the cache plugin is on; with ``-p no:cacheprovider``, one for this
    session, so the second run at least reuses the first."""
    cache = getattr(pytestconfig, "cache", None)
    return (
        cache.mkdir("mypy-installed-layout") if cache is not None else tmp_path_factory.mktemp("mypy-cache")
    )


@pytest.mark.slow
def test_the_installed_package_passes_mypy_strict(tmp_path: Path, mypy_cache: Path) -> None:
    tree = copy_installed_layout(tmp_path / "tree")
    proc = _run_mypy(tree, mypy_cache)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    checked = re.search(r"Success: no issues found in (\d+) source files", proc.stdout)
    assert checked is not None, output
    # every module was read: none was left out of the walk (a namespace folder counts as one more source)
    modules = list((tree / "gpuplan").rglob("*.py"))
    assert int(checked.group(1)) >= len(modules), output


def test_a_wrong_call_into_another_module_is_reported(tmp_path: Path, mypy_cache: Path) -> None:
    """The check itself works: in the installed layout mypy resolves gpuplan.planner.plan.build, so passing a
    str where ``spec_digest`` wants a Spec is an error (under the editable install it was Any, and silent)."""
    tree = copy_installed_layout(tmp_path / "tree")
    (tree / "gpuplan" / "planner" / "_mistyped.py").write_text(
        '"""Deliberately wrong."""\n'
        "from gpuplan.planner.plan.build import spec_digest\n"
        "\n"
        'DIGEST: str = spec_digest("not a spec")\n'
    )
    proc = _run_mypy(tree, mypy_cache)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert re.search(
        r'gpuplan/planner/_mistyped\.py:4: error: .*"spec_digest".*"str"; expected "Spec"', output
    ), output
