"""The span bridge on frameworks that emit OpenTelemetry themselves, run for real offline.

The Anthropic SDK (verified against 2.15.0) writes its own spans when given a tracer
provider: ``anthropic.messages.tool_runner`` (``invoke_agent``), ``anthropic.messages.create``
(``chat``, with ``gen_ai.usage.cache_write.input_tokens``) and ``anthropic.custom_tool_use
{tool}`` (``execute_tool``; arguments and result only in its ``content`` mode). It is driven
by its own tool runner against a scripted Messages API on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import RepetitionDetector, Usage
from loopobs.adapters.otel import ContentStrippingExporter, GenAISpanProcessor
from loopobs.testing import assert_contract
from tests._adapter_checks import Stack
from tests._anthropic_server import Message, ScriptedMessages

anthropic = pytest.importorskip("anthropic")
# The release series these tests passed on; pyproject.toml's dev extra caps anthropic below the
# next one, so a new series is verified (and added here) before the venv takes it.
VERIFIED_ANTHROPIC = ("2.15", "2.16")

Mode = Literal["metadata_only", "content"]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def test_the_installed_anthropic_release_is_one_verified() -> None:
    series = ".".join(anthropic.__version__.split(".")[:2])
    assert series in VERIFIED_ANTHROPIC, anthropic.__version__


def _run_tool_runner(
    processor: GenAISpanProcessor,
    script: list[Message],
    mode: Mode,
    conversation: str = "conv-1",
    exporter: SpanExporter | None = None,
) -> list[Any]:
    """The SDK's own tool runner, its spans going to ``processor`` (and to ``exporter``
    after it); the orders looked up."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    looked_up: list[str] = []

    def lookup(order: str) -> str:
        """Look an order up."""
        looked_up.append(order)
        return f"order {order}: shipped"

    provider = TracerProvider()
    provider.add_span_processor(processor)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        with ScriptedMessages(script) as server:
            client = anthropic.Anthropic(
                base_url=server.base_url,
                api_key="k",
                max_retries=0,
                open_telemetry={
                    "tracer_provider": provider,
                    "conversation_id": conversation,
                    "traces": {"content_mode": mode},
                },
            )
            runner = client.beta.messages.tool_runner(
                model="claude-test",
                max_tokens=100,
                tools=[anthropic.beta_tool(lookup)],
                messages=[{"role": "user", "content": "where are my orders"}],
            )
            messages = list(runner)
    finally:
        provider.shutdown()
    assert messages
    return looked_up


def test_the_anthropic_tool_runner_is_one_run_with_cache_write_tokens(stack: Stack) -> None:
    """Its native spans: one run, two model calls, input tokens with the cached ones, the
    cache-write tokens it writes under their current name (they were dropped before)."""
    script = [
        Message(calls=[("t1", "lookup", {"order": "A"})], usage=(10, 5, 4, 2)),
        Message("A has shipped", usage=(20, 3, 0, 6)),
    ]
    _run_tool_runner(GenAISpanProcessor(stack.observers), script, "metadata_only")
    # the SDK's input tokens include the cached ones: 10 + 4 + 2 and 20 + 6
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=8), chats=2, tools=1)
    rec = stack.recorder
    assert [c.cache_write_input_tokens for c in rec.of("on_stream_success")] == [4, 0]
    assert [c.cache_read_input_tokens for c in rec.of("on_stream_success")] == [2, 6]
    assert [c.tool for c in rec.of("on_tool_post")] == ["lookup"]
    assert [c.response_id for c in rec.of("on_stream_success")] == ["msg_0", "msg_1"]


def _orders(orders: list[str]) -> list[Message]:
    return [
        *(
            Message(calls=[(f"t{i}", "lookup", {"order": o})], usage=(5, 2, 0, 0))
            for i, o in enumerate(orders)
        ),
        Message("all shipped", usage=(5, 2, 0, 0)),
    ]


def test_a_productive_run_with_content_off_raises_no_false_alarm(stack: Stack) -> None:
    """The SDK's default (``metadata_only``): tool spans carry no arguments and no result.
    Six lookups of six different orders are new work, not a loop: no detection (before,
    every call of the tool looked the same and the detector warned at the third)."""
    orders = ["A", "B", "C", "D", "E", "F"]
    looked_up = _run_tool_runner(
        GenAISpanProcessor(stack.observers), _orders(orders), "metadata_only"
    )
    assert looked_up == orders
    assert len(stack.recorder.of("on_tool_post")) == 6
    assert stack.recorder.of("on_loop_detected") == []
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_a_runaway_is_detected_with_content_on(stack: Stack) -> None:
    """``content`` mode: the tool spans carry arguments and results, so the same lookup
    again and again is reported (warn, then stop), though the processor cannot stop it."""
    detector = RepetitionDetector(warn_after=3, stop_after=5)
    _run_tool_runner(
        GenAISpanProcessor(stack.observers, detectors=[detector]), _orders(["A"] * 6), "content"
    )
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn", "stop"]
    assert {c.result for c in stack.recorder.of("on_tool_post")} == {"order A: shipped"}
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_content_captured_in_process_is_hashed_and_stripped_before_export(stack: Stack) -> None:
    """Content on in the SDK, the app's exporter wrapped in ContentStrippingExporter: the
    detectors see the arguments and results (the runaway is reported), the exported spans
    carry none of them."""
    exported = InMemorySpanExporter()
    detector = RepetitionDetector(warn_after=3, stop_after=5)
    _run_tool_runner(
        GenAISpanProcessor(stack.observers, detectors=[detector]),
        _orders(["A"] * 6),
        "content",
        exporter=ContentStrippingExporter(exported),
    )
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn", "stop"]
    spans = exported.get_finished_spans()
    tools = [
        s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
    ]
    assert len(tools) == 6
    content = (
        "gen_ai.tool.call.arguments",
        "anthropic.tool_result.content",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
    )
    for span in spans:
        attrs = span.attributes or {}
        assert not [name for name in content if name in attrs], span.name
    assert all((s.attributes or {}).get("loopobs.content.stripped") for s in tools)
    # what is not content stays: names, ids, usage
    assert {(s.attributes or {}).get("gen_ai.tool.name") for s in tools} == {"lookup"}
    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    outputs = [(s.attributes or {}).get("gen_ai.usage.output_tokens") for s in chats]
    assert outputs == [2] * 7


def test_with_openllmetrys_anthropic_instrumentor_each_call_counts_once(stack: Stack) -> None:
    """OpenLLMetry's Anthropic instrumentor beside the SDK's own spans: each request has two
    sibling model spans with one ``gen_ai.response.id``, inside the tool runner's run and
    for a bare ``messages.create`` (each span then a trace by itself); one call each (it
    was two)."""
    pytest.importorskip("opentelemetry.instrumentation.anthropic")
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
    from opentelemetry.sdk.trace import TracerProvider

    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: shipped"

    provider = TracerProvider()
    provider.add_span_processor(GenAISpanProcessor(stack.observers))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    script = [
        Message(calls=[("t1", "lookup", {"order": "A"})], usage=(10, 5, 0, 0)),
        Message("A has shipped", usage=(20, 3, 0, 0)),
        Message("hi", usage=(7, 1, 0, 0)),
    ]
    try:
        with ScriptedMessages(script) as server:
            client = anthropic.Anthropic(
                base_url=server.base_url,
                api_key="k",
                max_retries=0,
                open_telemetry={"tracer_provider": provider},
            )
            list(
                client.beta.messages.tool_runner(
                    model="claude-test",
                    max_tokens=100,
                    tools=[anthropic.beta_tool(lookup)],
                    messages=[{"role": "user", "content": "where is A"}],
                )
            )
            client.messages.create(
                model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
            served = len(server.requests)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    assert served == 3
    successes = stack.recorder.of("on_stream_success")
    assert [c.response_id for c in successes] == ["msg_0", "msg_1", "msg_2"]
    assert sum(c.input_tokens for c in successes) == 10 + 20 + 7
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()
