"""The import paths of ``loopobs.core`` keep working for a release, with a warning.

Each runs in a fresh interpreter, so that an earlier import does not hide the warning.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from loopobs._moved import MOVED


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stderr


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_is_the_new_module_and_warns_once(old: str, new: str) -> None:
    """``import old`` gives the very module of ``new`` and warns, naming both."""
    stderr = _run(
        f"import importlib\nold = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\nassert old is new, (old, new)\n"
        f"importlib.import_module({old!r})\n"
    )
    assert stderr.count(f"{old} moved to {new}") == 1, stderr


def test_the_warning_points_at_the_users_import() -> None:
    """The warning names the line that imported the old path, not loopobs' own files."""
    stderr = _run("\n\nfrom loopobs.core.events import RunStartContext\n")
    assert "<string>:3: DeprecationWarning" in stderr, stderr


def test_old_packages_reexport_and_keep_their_submodules_single() -> None:
    """``loopobs.core.detectors`` re-exports the detectors, its submodules alias the new
    ones (no second copy of a module), and the split compaction module offers both halves."""
    stderr = _run(
        "import loopobs.core.detectors as old\nimport loopobs.detectors as new\n"
        "import loopobs.core.detectors.repetition as r\nimport loopobs.detectors.repetition as r2\n"
        "assert r is r2 and r.__name__ == 'loopobs.detectors.repetition'\n"
        "assert old.RepetitionDetector is new.RepetitionDetector\n"
        "import loopobs.core.compaction as c\n"
        "from loopobs.contract.compaction import Compactor\n"
        "from loopobs.loop.compaction import compact_if_needed\n"
        "assert c.Compactor is Compactor and c.compact_if_needed is compact_if_needed\n"
    )
    assert "loopobs.core.detectors moved to loopobs.detectors" in stderr
    assert "loopobs.core.compaction moved to" in stderr


def test_nothing_in_the_package_uses_an_old_path() -> None:
    """``import loopobs`` and every layer load without a single deprecation warning."""
    _run(
        "import warnings\nwarnings.simplefilter('error')\nimport loopobs, loopobs.exporters, "
        "loopobs.llm, loopobs.adapters, loopobs.report, loopobs.sessions, loopobs.detectors\n"
    )


def test_session_is_conversation_under_its_old_name() -> None:
    """``Session`` (from ``loopobs`` or ``loopobs.loop.run``) is ``Conversation``, and warns."""
    stderr = _run(
        "import loopobs\nfrom loopobs.loop import run\n"
        "assert loopobs.Session is loopobs.Conversation\n"
        "assert run.Session is run.Conversation\n"
        "from loopobs import Session\nassert Session is loopobs.Conversation\n"
    )
    lines = {
        line.split(":")[1]
        for line in stderr.splitlines()
        if "Session was renamed Conversation" in line
    }
    assert lines == {"3", "4", "5"}, stderr
