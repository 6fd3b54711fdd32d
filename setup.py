"""The detectors compiled with mypyc, when ``LOOPOBS_COMPILE=1`` (everything else is in
``pyproject.toml``).

A default build is pure Python. A compiled build's wheel holds these modules as C extensions
beside their sources, which Python imports in preference to the sources: a tool call's detection
costs about two thirds of its pure-Python time. The sources are the same; ``make test-compiled``
runs the detector tests against such a wheel. ``normalise.py`` stays interpreted: its pickler
subclasses the C ``pickle.Pickler``, which a compiled class cannot do safely.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import setup

COMPILED = [
    "loopobs/detectors/_session.py",
    "loopobs/detectors/commands.py",
    "loopobs/detectors/convergence.py",
    "loopobs/detectors/repetition.py",
]

HERMETIC = [
    "--ignore-missing-imports",
    "--allow-subclassing-any",
    "--no-warn-return-any",
    "--no-warn-unused-ignores",
]
"""mypy options of the compiled build. mypyc type-checks everything the compiled modules import,
and the build environment holds the package's dependencies only (build_backend), not its extras
(the OpenTelemetry SDK, prometheus_client, jsonschema's stubs): their imports are ``Any`` there,
which the strict configuration would report in modules that are not compiled. The compiled
modules import nothing outside the standard library, mypy_extensions and loopobs, so their
code is the same; ``make lint typecheck`` checks everything strictly with the extras installed."""


def ext_modules() -> list[Any]:
    if os.environ.get("LOOPOBS_COMPILE", "") != "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        if "egg_info" in sys.argv:
            # setuptools asks for the build requirements (build_backend adds mypy) by running
            # egg_info before they are installed; the build itself needs mypyc.
            return []
        raise
    return list(mypycify([*HERMETIC, *COMPILED], opt_level="3"))


setup(ext_modules=ext_modules())
