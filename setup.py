"""Maps the top-level folders of design §2 into the ``gpuplan`` namespace.

Each folder becomes ``gpuplan.<folder>`` (planner/ -> gpuplan.planner, ...), and every sub-folder with an
``__init__.py`` below it is found automatically, so adding a sub-package needs no packaging edit.
"""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
FOLDERS = {
    "gpuplan": "gpuplan",
    "planner": "gpuplan.planner",
    "providers": "gpuplan.providers",
    "modules": "gpuplan.modules",
    "state": "gpuplan.state",
    "sim": "gpuplan.sim",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = [], {}
    for folder, package in FOLDERS.items():
        for init in sorted((HERE / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(HERE / folder)
            name = ".".join([package, *relative.parts])
            packages.append(name)
            package_dir[name] = init.parent.relative_to(HERE).as_posix()
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"": ["py.typed", "*.yaml", "*.json", "*.json.gz", "*.csv", "*.html", "*.css", "*.js"]},
    include_package_data=True,
)
