"""The compiled build (``LOOPOBS_COMPILE=1``, setup.py): the wheel ``make test-compiled`` tests
is the compiled one, the dev venv's is the sources, and the build backend asks for what each
build needs."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import tomllib

import loopobs.detectors
from loopobs.detectors import COMPILED

ROOT = Path(__file__).resolve().parents[1]
COMPILED_MODULES = (
    "loopobs.detectors._session",
    "loopobs.detectors.commands",
    "loopobs.detectors.convergence",
    "loopobs.detectors.repetition",
)
"""setup.py's COMPILED, as modules."""


def test_the_detectors_run_compiled_exactly_when_the_run_expects_it() -> None:
    """make test-compiled sets LOOPOBS_EXPECT_COMPILED=1: a run of the sources there (the
    wheel not found first) or a stale compiled module in the dev tree fails here."""
    expected = os.environ.get("LOOPOBS_EXPECT_COMPILED") == "1"
    assert COMPILED is expected, (loopobs.detectors.__file__, COMPILED)
    for module in COMPILED_MODULES:
        file = importlib.import_module(module).__file__ or ""
        assert file.endswith(tuple(EXTENSION_SUFFIXES)) is expected, file
    # normalise.py stays interpreted (setup.py): its pickler subclasses C's pickle.Pickler.
    assert (importlib.import_module("loopobs.detectors.normalise").__file__ or "").endswith(".py")


def _backend(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The backend, with setuptools' own answers fixed (the venv's setuptools may be older
    than the isolated build's; the real builds run in make test and make test-compiled)."""
    path = ROOT / "build_backend" / "loopobs_backend.py"
    if not path.exists():
        pytest.skip("the build backend is in the source tree only")
    spec = importlib.util.spec_from_file_location("loopobs_backend_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    setuptools = SimpleNamespace(
        get_requires_for_build_wheel=lambda settings=None: ["wheel"],
        get_requires_for_build_editable=lambda settings=None: ["wheel", "editables"],
    )
    monkeypatch.setattr(module, "_setuptools", setuptools)
    return module


def test_a_compiled_build_asks_for_mypy_and_the_dependencies_a_pure_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = _backend(monkeypatch)
    monkeypatch.delenv("LOOPOBS_COMPILE", raising=False)
    pure = backend.get_requires_for_build_wheel()
    assert pure == ["wheel"]
    monkeypatch.setenv("LOOPOBS_COMPILE", "1")
    compiled = backend.get_requires_for_build_wheel()
    assert backend.MYPYC in compiled
    assert "mypy-extensions>=1.0" in compiled  # one of the project's own dependencies
    assert set(pure) <= set(compiled)


def test_a_compiled_editable_install_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(monkeypatch)
    monkeypatch.setenv("LOOPOBS_COMPILE", "1")
    with pytest.raises(RuntimeError, match="shadow the sources"):
        backend.get_requires_for_build_editable()
    monkeypatch.delenv("LOOPOBS_COMPILE")
    assert backend.get_requires_for_build_editable() == ["wheel", "editables"]


@pytest.mark.slow
def test_the_sdist_holds_the_build_backend_it_names(tmp_path: Path) -> None:
    """pyproject.toml's backend-path names build_backend/: an sdist without it builds nothing
    (MANIFEST.in brings it). make compiled builds its wheel from such an sdist, in an isolated
    environment; here the sdist alone, offline, from a copy of what it is made of."""
    if not (ROOT / "build_backend").is_dir():
        pytest.skip("the build backend is in the source tree only")
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", *(f"*{s}" for s in EXTENSION_SUFFIXES))
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("build_backend", "loopobs"):
        shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    environ = {k: v for k, v in os.environ.items() if k != "LOOPOBS_COMPILE"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "--skip-dependency-check",
            "-o",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (sdist,) = (tmp_path / "dist").glob("loopobs-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    top = sdist.name.removesuffix(".tar.gz")
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "build-system"
    ]
    backend = build_system["build-backend"].replace(".", "/") + ".py"
    for folder in build_system["backend-path"]:
        assert f"{top}/{folder}/{backend}" in names, sorted(n for n in names if folder in n)
    assert f"{top}/setup.py" in names


def test_what_is_compiled_is_named_alike_by_the_build_and_its_tests() -> None:
    """setup.py's COMPILED, read as scripts/build_wheels.py reads it to check each released
    wheel, names the modules this module checks."""
    script = ROOT / "scripts" / "build_wheels.py"
    if not script.exists():
        pytest.skip("scripts/ is in the source tree only")
    spec = importlib.util.spec_from_file_location("build_wheels_under_test", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compiled_modules() == COMPILED_MODULES
