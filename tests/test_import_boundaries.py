"""The folders are layers: no module imports a layer above its own, even lazily or for types.

From the bottom: the contract; then the clients, the detectors, cost and the exporters,
side by side (none imports another); then the loop; then sessions and MCP (side by
side); then the faces that may use anything (adapters, report, demo, CLI, testing, the
package itself, and the deprecated ``loopobs.core`` paths).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loopobs
from tests._ast import parse

PACKAGE = Path(loopobs.__file__).parent

LAYERS: dict[str, int] = {
    "loopobs._version": 0,
    "loopobs.contract": 0,
    "loopobs.llm": 1,
    "loopobs.detectors": 1,
    "loopobs.cost": 1,
    "loopobs.exporters": 1,
    "loopobs.loop": 2,
    "loopobs.sessions": 3,
    "loopobs.mcp": 3,
}
TOP = 4
"""Every other part of the package (adapters, report, demo, cli, testing, the face)."""


def _part(module: str) -> str:
    """The layer folder (or top-level module) a dotted module name belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _layer(module: str) -> int:
    return LAYERS.get(_part(module), TOP)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(source: str, package: str) -> set[str]:
    """Every loopobs module ``source`` imports, at module level, in functions or for types."""
    tree = parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            # ``from loopobs import loop`` names a module; ``from loopobs import X`` a face name.
            if module in ("loopobs", "loopobs.core"):
                found.update(
                    f"{module}.{a.name}"
                    for a in node.names
                    if (PACKAGE / a.name).is_dir() or (PACKAGE / f"{a.name}.py").exists()
                )
    return {m for m in found if m == "loopobs" or m.startswith("loopobs.")}


def _violations(me: str, source: str, *, is_package: bool = False) -> list[str]:
    mine = _layer(me)
    bad = []
    package = me if is_package else me.rpartition(".")[0]
    for target in sorted(_imports(source, package)):
        if target.startswith("loopobs._moved") or _part(target) == _part(me):
            continue
        theirs = _layer(target)
        if mine < TOP and theirs >= mine:
            bad.append(f"{me} (layer {mine}) imports {target} (layer {theirs})")
    return bad


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "core" not in p.relative_to(PACKAGE).parts)


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_no_import_points_up_or_sideways(path: Path) -> None:
    """A module imports only its own folder and the layers below it."""
    source = path.read_text(encoding="utf-8")
    assert _violations(_module_name(path), source, is_package=path.name == "__init__.py") == []


def test_every_folder_has_a_layer() -> None:
    """A new folder must be placed in the table above, else it would count as the top."""
    folders = {
        f"loopobs.{p.name}"
        for p in PACKAGE.iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    top = {"loopobs.adapters", "loopobs.report", "loopobs.demo", "loopobs.core", "loopobs.redis"}
    assert folders - top == set(LAYERS) - {"loopobs._version"}


def test_the_check_sees_upward_sideways_and_relative_imports() -> None:
    """The check itself: imports from a higher or a sibling layer are reported, whether lazy,
    type-only or relative."""
    lazy_up = "def f() -> None:\n    from loopobs.loop import driver\n"
    assert _violations("loopobs.contract.probe", lazy_up) == [
        "loopobs.contract.probe (layer 0) imports loopobs.loop (layer 2)"
    ]
    type_only_sideways = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from loopobs.cost.budget import Budget\n"
    )
    assert _violations("loopobs.exporters.probe", type_only_sideways) == [
        "loopobs.exporters.probe (layer 1) imports loopobs.cost.budget (layer 1)"
    ]
    relative_up = "from ..sessions import session\n"
    assert _violations("loopobs.loop.probe", relative_up) == [
        "loopobs.loop.probe (layer 2) imports loopobs.sessions (layer 3)"
    ]
    face_module = "from loopobs import mcp\n"
    assert _violations("loopobs.loop.probe", face_module) == [
        "loopobs.loop.probe (layer 2) imports loopobs (layer 4)",
        "loopobs.loop.probe (layer 2) imports loopobs.mcp (layer 3)",
    ]
    assert _violations("loopobs.loop.probe", "from loopobs.cost import budget\n") == []
