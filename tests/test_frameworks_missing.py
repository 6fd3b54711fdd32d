"""The native-framework adapters without their framework: a one-line install hint.

Runs where the framework is absent (the main venv); skips where it is installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework", "package", "extra"),
    [
        ("loopobs.adapters.adk", "google.adk", "google-adk", "adk"),
        ("loopobs.adapters.strands", "strands", "strands-agents", "strands"),
        (
            "loopobs.adapters.langchain_middleware",
            "langchain.agents",
            "langchain",
            "langchain-agents",
        ),
        ("loopobs.adapters.maf", "agent_framework", "agent-framework-core", "agent-framework"),
        ("loopobs.adapters.crewai", "crewai", "crewai", "crewai"),
        ("loopobs.adapters.ag2", "ag2", "ag2", "ag2"),
        ("loopobs.adapters.autogen", "autogen_core", "autogen-agentchat", "autogen"),
        ("loopobs.adapters.smolagents", "smolagents", "smolagents", "smolagents"),
    ],
)
def test_importing_an_adapter_without_its_framework_says_what_to_install(
    module: str, framework: str, package: str, extra: str
) -> None:
    try:
        found = importlib.util.find_spec(framework) is not None
    except ModuleNotFoundError:  # a parent package (google) is absent
        found = False
    if found:
        pytest.skip(f"{package} is installed here")
    # In a fresh interpreter: what a user's import meets, and no AST work beside this test's
    # (CPython 3.11.7 can fail an import with "AST constructor recursion depth mismatch"
    # while another thread of the process compiles: gh-106905).
    probe = (
        "import importlib, sys\n"
        "try:\n"
        f"    importlib.import_module({module!r})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    sys.exit('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.rstrip("\n")
    assert "\n" not in message
    assert f"needs {package}" in message
    assert f"pip install 'loopobs[{extra}]'" in message
