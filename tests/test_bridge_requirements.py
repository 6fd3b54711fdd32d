"""The span bridge's framework venvs (scripts/bridge-*-requirements.txt) hold loopobs's own
dependencies: their tests import the package from the tree on PYTHONPATH, so a dependency added
to pyproject.toml and not to each of these files fails only there, late in CI."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BRIDGE_FILES = sorted((ROOT / "scripts").glob("bridge-*-requirements.txt"))
# opentelemetry-sdk depends on the API at its own release: listing the SDK is listing the API.
PROVIDED_BY = {"opentelemetry-api": "opentelemetry-sdk"}


def _core_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]]


def _listed(path: Path) -> set[str]:
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec and not spec.startswith("-"):
            names.add(canonicalize_name(Requirement(spec).name))
    return names


def test_there_are_bridge_venvs_to_check() -> None:
    assert len(BRIDGE_FILES) >= 9, BRIDGE_FILES


@pytest.mark.parametrize("path", BRIDGE_FILES, ids=lambda p: p.name)
def test_each_bridge_venv_lists_every_core_dependency(path: Path) -> None:
    listed = _listed(path)
    missing = [
        name
        for name in _core_dependencies()
        if name not in listed and PROVIDED_BY.get(name) not in listed
    ]
    assert not missing, f"{path.name} lacks {missing} (pyproject.toml's [project] dependencies)"
