"""The public surface: ``loopobs.__all__`` and a core that imports without the heavy extras."""

from __future__ import annotations

import inspect
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest

import loopobs
import loopobs.core
from loopobs.core import errors, events, observer

HEAVY = ("opentelemetry.sdk", "prometheus_client", "genai_prices")
CORE_MODULES = [
    "loopobs",
    *sorted(m.name for m in pkgutil.iter_modules(loopobs.core.__path__, "loopobs.core.")),
]


def test_all_is_sorted_and_unique() -> None:
    """__all__ is in plain string order and names nothing twice."""
    names = list(loopobs.__all__)
    assert len(names) == len(set(names))
    assert names == sorted(names)


def test_every_exported_name_resolves() -> None:
    """Each name in __all__ is an attribute of the package (lazy ones included)."""
    missing = [n for n in loopobs.__all__ if not hasattr(loopobs, n)]
    assert missing == []
    namespace: dict[str, object] = {}
    exec("from loopobs import *", namespace)
    assert set(loopobs.__all__) <= set(namespace)


@pytest.mark.parametrize("module", [events, errors, observer], ids=lambda m: m.__name__)
def test_every_public_class_of_the_contract_is_exported(module: ModuleType) -> None:
    """Public classes and names of events, errors and observer are reachable from loopobs."""
    public_classes = {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value) and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    exported = set(loopobs.__all__)
    assert public_classes - exported == set()
    assert set(module.__all__) - exported == set()
    for name in module.__all__:
        assert getattr(loopobs, name) is getattr(module, name)


def test_core_module_list_includes_the_contract() -> None:
    """The import check below covers the package and every core module, the loop included."""
    assert {"loopobs", "loopobs.core.events", "loopobs.core.errors", "loopobs.core.observer",
            "loopobs.core.loop", "loopobs.core.driver"} <= set(CORE_MODULES)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_imports_without_heavy_extras(module: str) -> None:
    """Importing the core pulls in neither the OpenTelemetry SDK nor prometheus_client."""
    code = (
        "import sys\n"
        f"import {module}\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
        "for h in heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"
