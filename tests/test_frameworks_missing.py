"""The native-framework adapters without their framework: a one-line install hint.

Runs where the framework is absent (the main venv); skips where it is installed.
"""

from __future__ import annotations

import importlib
import importlib.util

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
    with pytest.raises(ImportError) as info:
        importlib.import_module(module)
    assert "\n" not in str(info.value)
    assert f"needs {package}" in str(info.value)
    assert f"pip install 'loopobs[{extra}]'" in str(info.value)
