"""The layers of design §2 hold: import-linter's contracts in pyproject.toml are kept.

import-linter walks packages on disk and does not follow setuptools' folder mapping (planner/ ->
gpuplan.planner), so the test lays the namespace out as it is installed (tests/installed_layout.py), in a
temporary folder, and lints that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

if str(Path(__file__).parent) not in sys.path:  # importlib mode keeps tests/ off sys.path
    sys.path.insert(0, str(Path(__file__).parent))

from installed_layout import ROOT, copy_installed_layout  # noqa: E402


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the installed layout in ``tree``, with pyproject.toml's contracts."""
    lint_imports = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [lint_imports, "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )


def test_import_linter_contracts_are_kept(tmp_path: Path) -> None:
    tree = copy_installed_layout(tmp_path / "tree")
    proc = _lint(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 7 kept, 0 broken." in proc.stdout


def test_a_broken_layer_is_detected(tmp_path: Path) -> None:
    """The check itself works: state importing the planner (upwards) breaks the layers contract."""
    tree = copy_installed_layout(tmp_path / "tree")
    (tree / "gpuplan" / "state" / "_upwards.py").write_text("import gpuplan.planner\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "gpuplan.state._upwards -> gpuplan.planner" in proc.stdout


def test_a_planner_package_importing_a_higher_one_is_detected(tmp_path: Path) -> None:
    """The planner's own layers: the health gates may not reach up into the apply walker."""
    tree = copy_installed_layout(tmp_path / "tree")
    (tree / "gpuplan" / "planner" / "health" / "_upwards.py").write_text(
        "import gpuplan.planner.apply.walker\n"
    )
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "gpuplan.planner.health._upwards -> gpuplan.planner.apply.walker" in proc.stdout


def test_the_engine_importing_a_concrete_provider_is_detected(tmp_path: Path) -> None:
    """The planner reaches the cluster through providers.protocols only: even a name imported from the
    concrete writer (a value type that lives in the protocols) breaks the contract."""
    tree = copy_installed_layout(tmp_path / "tree")
    (tree / "gpuplan" / "planner" / "apply" / "_concrete.py").write_text(
        "from gpuplan.providers.kubernetes_write import KubernetesWriter\n"
    )
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "gpuplan.planner.apply._concrete -> gpuplan.providers.kubernetes_write" in proc.stdout


def test_the_error_tree_imports_without_the_cli() -> None:
    """State, providers, modules and the simulator raise gpuplan's errors; importing them loads no CLI."""
    code = "import sys, gpuplan.errors; "
    code += "print(sorted(m for m in sys.modules if m.startswith(('gpuplan', 'click'))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "['gpuplan', 'gpuplan.errors']"
