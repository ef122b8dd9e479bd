"""The official client's package, loaded without the eager imports of its ``__init__``.

``kubernetes/__init__.py`` imports every sub-package it has: the client and the kubeconfig loader the provider
modules use, and ``dynamic`` (with ``kubernetes_validate`` and jsonschema, where installed), ``watch``,
``stream`` (websocket), ``utils``, ``leaderelection`` and ``informer``, which they import themselves where
they need them (:mod:`.watch`). The rest cost 40 ms of a 0.6 s plan. :func:`defer_package_init` registers
the package module without running that ``__init__``: ``import kubernetes.client`` then loads the client
alone, a sub-package named as an attribute (``from kubernetes import config``) is imported when first asked
for, and any other attribute (``kubernetes.__version__``) runs the real ``__init__`` once, so that code
expecting the whole package finds it whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

PACKAGE = "kubernetes"


def defer_package_init() -> None:
    """Register the ``kubernetes`` package with its ``__init__`` deferred (see the module doc); nothing when
    it is imported already, or not installed (its import then fails where it is made, with its own error)."""
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    # PEP 562's module __getattr__, set by name: typing sees ModuleType's method, not a module attribute
    setattr(package, "__getattr__", _attribute_of(package, spec))  # noqa: B010
    sys.modules[PACKAGE] = package


def _attribute_of(package: ModuleType, spec: ModuleSpec) -> object:
    def attribute(name: str) -> object:
        if not name.startswith("_") and importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
            return importlib.import_module(f"{PACKAGE}.{name}")
        delattr(package, "__getattr__")
        assert spec.loader is not None  # checked when registered
        spec.loader.exec_module(package)  # the package's own __init__: every sub-package, its version
        return getattr(package, name)

    return attribute
