"""The public surface: ``loopobs.__all__`` and a core that imports without the heavy extras."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import loopobs
import loopobs.contract
import loopobs.cost
import loopobs.detectors
import loopobs.loop
import loopobs.sessions
from loopobs.contract import errors, events, observer
from tests._ast import parse

CORE_PACKAGES = (loopobs.contract, loopobs.cost, loopobs.detectors, loopobs.loop, loopobs.sessions)
"""The layers below the exporters and the clients: the contract, cost, the loop, sessions."""
HEAVY = ("opentelemetry.sdk", "prometheus_client", "genai_prices")
CORE_MODULES = [
    "loopobs",
    *sorted(
        m.name
        for pkg in CORE_PACKAGES
        for m in pkgutil.iter_modules(pkg.__path__, f"{pkg.__name__}.")
    ),
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
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    exported = set(loopobs.__all__)
    assert public_classes - exported == set()
    assert set(module.__all__) - exported == set()
    for name in module.__all__:
        assert getattr(loopobs, name) is getattr(module, name)


def test_core_module_list_includes_the_contract() -> None:
    """The import check below covers the package and every core module, the loop included."""
    assert {
        "loopobs",
        "loopobs.contract.events",
        "loopobs.contract.errors",
        "loopobs.contract.observer",
        "loopobs.loop.loop",
        "loopobs.loop.driver",
    } <= set(CORE_MODULES)


def test_core_imports_without_heavy_extras() -> None:
    """Importing the core pulls in neither the OpenTelemetry SDK nor prometheus_client.

    One interpreter imports every core module: what it loads is the union of what
    each module loads, so none of them may load a heavy extra.
    """
    code = (
        "import importlib, sys\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
        "for h in heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", f"the core imports {out.stdout.strip()}"


def _imported_modules(path: Path) -> set[str]:
    tree = parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(
    "path",
    sorted(p for pkg in CORE_PACKAGES for p in Path(pkg.__path__[0]).glob("*.py")),
    ids=lambda p: f"{p.parent.name}.{p.stem}",
)
def test_core_imports_neither_exporters_nor_clients(path: Path) -> None:
    """No core module imports ``loopobs.exporters`` or ``loopobs.llm``, even lazily."""
    leaks = sorted(
        m for m in _imported_modules(path) if m.startswith(("loopobs.exporters", "loopobs.llm"))
    )
    assert leaks == []


def test_import_loopobs_loads_neither_exporters_nor_clients() -> None:
    """``import loopobs`` (the whole public surface) leaves the exporters and clients unloaded."""
    code = (
        "import sys, loopobs\n"
        "print(sorted(m for m in sys.modules if m.startswith(('loopobs.exporters', "
        "'loopobs.llm'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_private_helpers_stay_in_their_module() -> None:
    """No module of the package imports another module's ``_private`` name."""
    root = Path(loopobs.__path__[0])
    offenders: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loopobs"):
                offenders.extend(
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                )
    assert offenders == []


def test_every_type_in_a_public_signature_is_exported() -> None:
    """Types the public classes and functions take or return are importable from loopobs."""
    exported = {id(getattr(loopobs, n)) for n in loopobs.__all__ if n != "configure"}
    missing: set[str] = set()
    # configure() is the exporters' entry point; its types live in loopobs.exporters.
    for name in (n for n in loopobs.__all__ if n != "configure"):
        value = getattr(loopobs, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        members: list[Any] = [value]
        if inspect.isclass(value):
            members += [
                m for n, m in vars(value).items() if inspect.isfunction(m) and not n.startswith("_")
            ]
            members.append(value.__init__)
        for member in members:
            try:
                hints = typing.get_type_hints(member)
            except Exception:  # pragma: no cover - a hint that does not resolve is a bug
                raise AssertionError(f"{name}: unresolvable annotations") from None
            for hint in hints.values():
                for t in _named_types(hint):
                    if t.__module__.startswith("loopobs") and id(t) not in exported:
                        missing.add(f"{t.__module__}.{t.__qualname__} (in {name})")
    assert sorted(missing) == []


def _named_types(hint: object) -> list[type]:
    found: list[type] = []
    stack = [hint]
    while stack:
        h = stack.pop()
        if isinstance(h, type):
            found.append(h)
        stack.extend(typing.get_args(h))
        origin = typing.get_origin(h)
        if isinstance(origin, type):
            found.append(origin)
    return found


def test_lazy_exports_agree_in_their_three_places() -> None:
    """Each name ``loopobs`` loads on first use is in ``_LAZY``, in ``__all__`` and in a
    ``TYPE_CHECKING`` import (for type checkers), and nowhere only in some of them."""
    tree = ast.parse(Path(loopobs.__file__).read_text(encoding="utf-8"))
    typed: set[str] = set()
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    typed.update(a.asname or a.name for a in stmt.names)
    lazy = set(loopobs._LAZY)
    assert lazy == typed
    assert lazy <= set(loopobs.__all__)
    for name, module in loopobs._LAZY.items():
        assert getattr(importlib.import_module(module), name) is getattr(loopobs, name)
