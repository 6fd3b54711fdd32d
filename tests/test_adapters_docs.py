"""The adapter pages' examples run as written, and each page keeps its table of events."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from loopobs.testing import assert_contract

DOCS = Path(__file__).resolve().parents[1] / "docs" / "adapters"


def _example(page: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, f"{page}: one runnable example"
    return str(blocks[0])


@pytest.mark.parametrize("page", ["openai_agents.md", "pydantic_ai.md"])
def test_the_example_runs_answers_and_stops_the_loop(page: str) -> None:
    """The example answers, then its runaway loop ends in RunStopped; the contract holds."""
    namespace: dict[str, object] = {"__name__": "docs_example"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_example(page), str(DOCS / page), "exec"), namespace)
    assert out.getvalue().splitlines() == [
        "Refunds take five days.",
        "stopped: the tool call pattern search(refunds) repeated 5 times"]
    recorder = namespace["recorder"]
    events = recorder.events  # type: ignore[attr-defined]
    assert_contract(events)
    assert [c.status for h, c in events if h == "on_run_end"] == ["completed", "loop_detected"]


@pytest.mark.parametrize("page", ["openai_agents.md", "pydantic_ai.md"])
def test_the_page_says_what_stop_means_and_what_is_not_provided(page: str) -> None:
    """Each page keeps its 'stop' section and its provided / not provided table."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert '## What "stop" means here' in text
    table = text.split("can and cannot tell us", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    assert any("| no |" in row for row in rows)
    assert any("| yes |" in row for row in rows)
    assert "text and thinking deltas" in table
