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
    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=ext_modules())
