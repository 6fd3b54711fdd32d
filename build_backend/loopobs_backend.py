"""The package's PEP 517 build backend: setuptools', plus what compiling the detectors needs.

A default build is pure Python and needs setuptools alone. ``LOOPOBS_COMPILE=1`` builds a wheel
whose hot detector modules are compiled with mypyc (see ``setup.py``): mypyc then needs mypy, and
the package's own dependencies, so that it can type the imports of the modules it compiles.
Editable installs are refused then: a compiled module would shadow the source being edited.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tomllib
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks passed on unchanged)

MYPYC = "mypy>=2.4,<3"
"""The mypy whose mypyc compiles the detectors (the dev venv's, ``pyproject.toml``'s ``dev``)."""


def compiling() -> bool:
    """Whether this build compiles the detectors (``LOOPOBS_COMPILE=1``)."""
    return os.environ.get("LOOPOBS_COMPILE", "") == "1"


def _project_dependencies() -> list[str]:
    with (Path(__file__).parent.parent / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    requires = list(_setuptools.get_requires_for_build_wheel(config_settings))
    if compiling():
        requires += [MYPYC, *_project_dependencies()]
    return requires


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    if compiling():
        raise RuntimeError(
            "LOOPOBS_COMPILE=1 builds wheels, not editable installs: the compiled detector "
            "modules would shadow the sources being edited (make test-compiled builds a wheel)"
        )
    return list(_setuptools.get_requires_for_build_editable(config_settings))
