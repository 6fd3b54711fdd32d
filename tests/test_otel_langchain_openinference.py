"""The span bridge on OpenInference's LangChain and OpenAI instrumentors together.

Both on (a common Phoenix setup): each model call of a LangGraph graph is a LangChain
``LLM`` span in the graph's trace and an OpenAI ``LLM`` span that is no child of it (a
trace of its own: the LangChain instrumentor does not make its span current). Both
describe one request, so the processor counts it once, in the graph's run. Real
instrumentors, LangChain's real OpenAI chat model, the scripted OpenAI server on
127.0.0.1. Kept out of ``tests/test_adapters_*.py`` (langchain-openai is not in ``.venv-min``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from loopobs import Usage
from loopobs.adapters.otel import GenAISpanProcessor
from tests._adapter_checks import Stack
from tests._langgraph_app import react_graph
from tests._openai_server import Reply, ScriptedServer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


_SCRIPT = [
    Reply(calls=[("c1", "add", {"a": 1, "b": 2})], usage=(12, 7)),
    Reply("the sum is 3", usage=(30, 4)),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def _instrumented(stack: Stack, *, openai_too: bool) -> tuple[TracerProvider, Any, list[Any]]:
    provider = TracerProvider()
    processor = GenAISpanProcessor(stack.observers)
    spans = InMemorySpanExporter()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentors: list[Any] = [LangChainInstrumentor()]
    if openai_too:
        instrumentors.append(OpenAIInstrumentor())
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    return provider, spans, instrumentors


@pytest.mark.parametrize("openai_too", [False, True])
@pytest.mark.parametrize("streamed", [False, True])
def test_each_model_call_is_counted_once(stack: Stack, openai_too: bool, streamed: bool) -> None:
    provider, spans, instrumentors = _instrumented(stack, openai_too=openai_too)
    try:
        with ScriptedServer(_SCRIPT, usage_when_asked=True) as server:
            model = ChatOpenAI(
                model="gpt-test",
                base_url=server.base_url,
                api_key=SecretStr("sk-test"),
                stream_usage=True,
            )
            graph = react_graph(model.bind_tools([add]), [add])
            request = {"messages": [("user", "add 1+2")]}
            if streamed:
                list(graph.stream(request, stream_mode="messages"))
            else:
                graph.invoke(request)
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        provider.shutdown()
    scopes = [s.instrumentation_scope.name for s in spans.get_finished_spans() if s.name != "add"]
    model_spans = [
        s for s in spans.get_finished_spans() if s.name in ("ChatOpenAI", "ChatCompletion")
    ]
    # what makes this case: with both on, every request has two model spans in two traces
    assert len(model_spans) == (4 if openai_too else 2)
    if openai_too:
        assert "openinference.instrumentation.openai" in scopes
        lone = [s for s in model_spans if s.name == "ChatCompletion"]
        ours = {s.context.span_id for s in spans.get_finished_spans()}
        # no parent among this provider's spans (in a process where OpenLLMetry's OpenAI
        # instrumentation was undone, its leftover wrapper's span of another provider may be)
        assert all(s.parent is None or s.parent.span_id not in ours for s in lone)
    assert len(server.requests) == 2
    rec = stack.recorder
    assert len(rec.of("on_run_start")) == 1  # the graph's run; no run per OpenAI span
    ok = rec.of("on_stream_success")
    assert [(c.input_tokens, c.output_tokens) for c in ok] == [(12, 7), (30, 4)]
    assert rec.of("on_run_end")[0].input_tokens == 42
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=1)


def test_a_lone_openai_call_while_another_trace_is_open_is_still_counted(stack: Stack) -> None:
    """An OpenAI call of its own, made while an unrelated trace's span is open: it is held
    until that span ends (it could have been the same request), then reported."""
    provider = TracerProvider()
    provider.add_span_processor(GenAISpanProcessor(stack.observers))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        import openai

        with ScriptedServer([Reply("hi", usage=(5, 1))]) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            other = provider.get_tracer("app").start_span("POST /elsewhere")
            client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "hi"}]
            )
            assert stack.recorder.of("on_stream_success") == []  # held: a span is open
            other.end()
    finally:
        instrumentor.uninstrument()
    ok = stack.recorder.of("on_stream_success")
    assert [(c.input_tokens, c.output_tokens) for c in ok] == [(5, 1)]
    assert [c.status for c in stack.recorder.of("on_run_end")] == ["completed"]
    provider.shutdown()
