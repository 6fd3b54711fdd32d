"""The demo's concierge scenario shows an MCP server's tool and an injected hint."""

from __future__ import annotations

import random

import pytest

from loopobs.demo.showcase import SCENARIOS, Showcase
from loopobs.exporters.console import render_run
from loopobs.testing import RecordingObserver, check_contract

pytestmark = pytest.mark.slow  # starts the demo's MCP server process


async def test_concierge_uses_an_mcp_tool_and_an_injected_hint() -> None:
    recorder = RecordingObserver()
    first, second = await SCENARIOS["concierge"](Showcase([recorder], random.Random(1)))
    assert first.ok
    assert second.ok
    mcp_posts = [p for p in recorder.of("on_tool_post") if p.mcp is not None]
    assert sorted((p.tool, p.is_error) for p in mcp_posts) == [
        ("plug_type", False),
        ("plug_type", True),
        ("visa_rules", False),
    ]
    assert all(p.mcp.server == "travel-facts" for p in mcp_posts)
    assert {p.mcp.error_type for p in mcp_posts if p.is_error} == {"tool_error"}
    skipped = {
        c.outcome for c in recorder.of("on_context_provider") if c.provider == "loyalty_points"
    }
    assert skipped == {"timeout"}
    hints = [c for c in recorder.of("on_context_provider") if c.provider == "injected_hint"]
    assert [h.run_id for h in hints] == [second.run_id]
    assert check_contract(recorder.events) == []
    first_tree, _ = render_run([c for _, c in recorder.for_run(first.run_id)])
    second_tree, _ = render_run([c for _, c in recorder.for_run(second.run_id)])
    assert "mcp travel-facts" in first_tree
    assert "context injected_hint" in second_tree
