"""The ADK, Strands and LangChain-agents pages' examples run as written where installed.

tests/test_docs.py runs every other page's blocks; these two need frameworks that live in their
own venv (``make test-frameworks``), so they run here and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "adapters"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize(
    ("page", "framework"),
    [
        ("adk.md", "google.adk"),
        ("strands.md", "strands"),
        ("langchain_agents.md", "langchain.agents"),
    ],
)
def test_the_page_answers_with_a_stopped_loop(page: str, framework: str) -> None:
    if not _installed(framework):
        pytest.skip(f"{framework} runs in its own venv: make test-frameworks")
    (block,) = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(DOCS / page), "exec"), {"__name__": "docs_example"})
    lines = out.getvalue().splitlines()
    assert re.fullmatch(
        r"stopped: the tool call pattern get_weather\(args#[0-9a-f]{8}\) "
        r"repeated 3 times",
        lines[0],
    )
    assert lines[1] == "loop_detected 360"
