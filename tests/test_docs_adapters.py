"""The adapter pages' examples run as written (like the README's)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import re
from pathlib import Path

import pytest

from tests._ast import compile_source

DOCS = Path(__file__).resolve().parents[1] / "docs" / "adapters"


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


def _run(page: str, block: str) -> tuple[dict[str, object], str]:
    """Run one block on its own (as tests/test_docs.py does), capturing what it prints."""
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile_source(block, str(DOCS / page)), namespace)
    return namespace, out.getvalue()


def test_the_langchain_page_runs_and_stops_its_runaway_loop() -> None:
    """The ReAct example answers and reports its run; the stop example ends with RunStopped."""
    from loopobs.adapters import RunStopped

    blocks = _blocks("langchain.md")
    assert len(blocks) == 2
    _, out = _run("langchain.md", blocks[0])
    assert out.splitlines() == ["1 + 2 = 3", "completed"]
    namespace, out = _run("langchain.md", blocks[1])
    assert isinstance(namespace["stopped"], RunStopped)
    assert re.search(
        r"stopped: the tool call pattern add\(args#[0-9a-f]{8}\) repeated 3 times", out
    )
    assert out.rstrip().endswith("loop_detected")


def test_the_otel_page_runs() -> None:
    """The span example reports one run and counts its tool call in Prometheus."""
    blocks = _blocks("otel.md")
    assert len(blocks) == 3
    _, out = _run("otel.md", blocks[0])
    assert out.splitlines() == ["['on_run_end']", "1.0"]
    _run("otel.md", blocks[1])  # instruments the openai client into the processor, and undoes it
    _run("otel.md", blocks[2])  # content hashed for the detectors, stripped before export


@pytest.mark.parametrize("page", ["openai_agents.md", "pydantic_ai.md"])
def test_the_agents_sdk_and_pydantic_ai_pages_answer_and_stop_their_loop(page: str) -> None:
    """The example answers, then its runaway loop ends in RunStopped; the contract holds."""
    from loopobs.testing import assert_contract

    if page == "openai_agents.md" and importlib.util.find_spec("agents.testing") is None:
        pytest.skip(
            f"openai-agents {importlib.metadata.version('openai-agents')} has no "
            "agents.testing.ScriptedModel, which the page's example runs on"
        )

    blocks = _blocks(page)
    assert len(blocks) == 1
    namespace, out = _run(page, blocks[0])
    answer, stopped = out.splitlines()
    assert answer == "Refunds take five days."
    # The stop names the tool and a hash of its arguments (content stays out of errors).
    assert re.fullmatch(
        r"stopped: the tool call pattern search\(args#[0-9a-f]{8}\) "
        r"repeated 5 times",
        stopped,
    )
    events = namespace["recorder"].events  # type: ignore[attr-defined]
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
