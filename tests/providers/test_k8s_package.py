"""The official client's package is registered with its eager imports deferred: a plan loads the client and
the kubeconfig loader, not the dynamic client (with jsonschema), watch, stream or leader election; code that
asks for the rest finds the whole package."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

EAGER = ("kubernetes.dynamic", "kubernetes.stream", "kubernetes.leaderelection", "kubernetes.informer")


def python(code: str) -> list[str]:
    """The lines a fresh interpreter prints running ``code`` (this process has the package loaded whole)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return proc.stdout.split()


def test_the_provider_loads_the_client_and_the_kubeconfig_loader_alone() -> None:
    loaded = python(
        "import sys\nimport gpuplan.providers.kubernetes\n"
        "print(*sorted(m for m in sys.modules if m.startswith('kubernetes.') and m.count('.') == 1))"
    )
    assert {"kubernetes.client", "kubernetes.config"} <= set(loaded)
    assert not set(EAGER) & set(loaded)


def test_a_sub_package_named_as_an_attribute_is_imported_alone() -> None:
    printed = python(
        "import sys\nimport gpuplan.providers\nfrom kubernetes import watch\nimport kubernetes\n"
        "print(kubernetes.watch is watch, 'kubernetes.dynamic' in sys.modules)"
    )
    assert printed == ["True", "False"]


def test_any_other_attribute_runs_the_package_s_own_init() -> None:
    printed = python(
        "import sys\nimport gpuplan.providers\nimport kubernetes\n"
        "print(kubernetes.__version__, all(m in sys.modules for m in " + repr(EAGER) + "))"
    )
    assert printed == [metadata.version("kubernetes"), "True"]


def test_a_package_imported_before_is_left_as_it_is() -> None:
    import kubernetes

    from gpuplan.providers.k8s_package import defer_package_init

    defer_package_init()
    assert sys.modules["kubernetes"] is kubernetes and kubernetes.__version__
