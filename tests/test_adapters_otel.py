"""The OTel span processor, fed by real instrumentors on the official openai client."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer, set_span_in_context
from opentelemetry.util.types import AttributeValue

from loopobs import EventContext, RepetitionDetector, ToolExecutionError, Usage
from loopobs import tool as loopobs_tool
from loopobs.adapters.otel import GenAISpanProcessor
from loopobs.contract.observer import EventSink
from loopobs.exporters.tracing import TracingObserver
from loopobs.llm.scripted import Reply as LoopReply
from loopobs.llm.scripted import ToolCall as LoopCall
from loopobs.testing import assert_contract
from tests._adapter_checks import Stack, agent_loop_sums
from tests._instrumented_app import (
    TOOL_SCHEMAS,
    TOOLS,
    Convention,
    _result_attr,
    _tool_attrs,
    instrumented,
    run_agent,
    run_agent_async,
)
from tests._openai_server import Reply, ScriptedServer

CONVENTIONS: list[Convention] = ["openinference", "genai"]

SCRIPT = [
    Reply(
        calls=[("call_1", "add", {"a": 1, "b": 2}), ("call_2", "add", {"a": 3, "b": 4})],
        usage=(12, 7),
    ),
    Reply("3 and 7", usage=(30, 4)),
]


class _Route(SpanProcessor):
    """Forwards to the current test's processors (the instrumentors are set up once per
    module: OpenLLMetry's uninstrument leaves wrappers behind, so it is done only at the end)."""

    def __init__(self) -> None:
        self.targets: list[SpanProcessor] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self.targets:
            target.on_end(span)


@dataclass
class Instrumented:
    convention: Convention
    provider: TracerProvider
    route: _Route


@pytest.fixture(scope="module", params=CONVENTIONS)
def instrumentation(request: pytest.FixtureRequest) -> Iterator[Instrumented]:
    provider = TracerProvider()
    route = _Route()
    provider.add_span_processor(route)
    with instrumented(request.param, provider):
        yield Instrumented(request.param, provider, route)
    provider.shutdown()


class App:
    """The instrumented app: spans go to its exporter and to our processor."""

    def __init__(self, instrumentation: Instrumented, processor: GenAISpanProcessor) -> None:
        self.convention = instrumentation.convention
        self.spans = InMemorySpanExporter()
        self.provider = instrumentation.provider
        self.tracer = self.provider.get_tracer("app")
        self.processor = processor
        self._route = instrumentation.route
        self._route.targets = [SimpleSpanProcessor(self.spans), processor]

    def close(self) -> None:
        self._route.targets = []
        self.processor.shutdown()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def _app(stack: Stack, instrumentation: Instrumented, **kwargs: object) -> Iterator[App]:
    app = App(instrumentation, GenAISpanProcessor(stack.observers, **kwargs))  # type: ignore[arg-type]
    yield app
    app.close()


def test_an_instrumented_agent_is_one_run_with_exact_usage(
    stack: Stack, instrumentation: Instrumented, tmp_path: Path
) -> None:
    """Agent span, two model spans, two tool spans → the whole list of what must hold."""
    for app in _app(stack, instrumentation):
        with ScriptedServer(SCRIPT) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            assert run_agent(client, app.tracer, app.convention, "add") == "3 and 7"
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)
    rec = stack.recorder
    (start,) = rec.of("on_run_start")
    assert start.agent == "calc"
    assert [c.tool_call_id for c in rec.of("on_tool_call_received")] == ["call_1", "call_2"]
    assert [c.tool_calls for c in rec.of("on_response")] == [2, 0]
    assert [c.model for c in rec.of("on_stream_start")] == ["gpt-test", "gpt-test"]
    assert {c.result for c in rec.of("on_tool_post")} == {"3", "7"}
    # the same script through AgentLoop: the same metric totals on both paths
    script = [
        LoopReply(
            tool_calls=(
                LoopCall("add", {"a": 1, "b": 2}, "call_1"),
                LoopCall("add", {"a": 3, "b": 4}, "call_2"),
            ),
            usage=Usage(input_tokens=12, output_tokens=7),
        ),
        LoopReply(text="3 and 7", usage=Usage(input_tokens=30, output_tokens=4)),
    ]

    @loopobs_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert stack.metric_sums() == agent_loop_sums(tmp_path, script, [add], "add")
    # the app's own spans are untouched, and loopobs's spans are not among them
    assert not [
        s
        for s in app.spans.get_finished_spans()
        if s.instrumentation_scope and s.instrumentation_scope.name == "loopobs"
    ]


def test_spans_without_an_agent_span_are_one_run_per_trace(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """A request span holding model and tool spans: one run, ended with the request span."""
    for app in _app(stack, instrumentation):
        with ScriptedServer(SCRIPT) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            run_agent(client, app.tracer, app.convention, "add", agent_span=False)
            run_agent(client, app.tracer, app.convention, "add", agent_span=False)
    # the second request gets the server's last reply again: an answer without tools
    stack.check_run(
        usage=Usage(input_tokens=12 + 30 * 2, output_tokens=7 + 4 * 2), chats=3, tools=2, runs=2
    )


def test_two_instrumentors_on_one_client_count_each_call_once(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """OpenLLMetry's and OpenInference's OpenAI instrumentations both on: each request has
    two model spans, one nested in the other; the call is reported once (it was twice)."""
    if instrumentation.convention != "genai":
        pytest.skip("OpenInference's instrumentor is added on top of OpenLLMetry's")
    from openinference.instrumentation.openai import OpenAIInstrumentor

    second = OpenAIInstrumentor()
    second.instrument(tracer_provider=instrumentation.provider)
    try:
        for app in _app(stack, instrumentation):
            with ScriptedServer(SCRIPT) as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
                assert run_agent(client, app.tracer, app.convention, "add") == "3 and 7"
            scopes = {
                s.instrumentation_scope.name
                for s in app.spans.get_finished_spans()
                if s.instrumentation_scope is not None
            }
            assert "openinference.instrumentation.openai" in scopes
    finally:
        second.uninstrument()
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)
    assert len(server.requests) == 2


def _bare_calls(client: openai.OpenAI, tracer: Tracer, convention: Convention, turns: int) -> None:
    """An app with no span of its own: each model and tool span is a trace by itself."""
    messages: list[object] = [{"role": "user", "content": "go"}]
    for _ in range(turns):
        reply = client.chat.completions.create(
            model="gpt-test",
            messages=messages,  # type: ignore[arg-type]
            tools=TOOL_SCHEMAS,
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            fn = call.function  # type: ignore[union-attr]
            with tracer.start_as_current_span(
                f"execute_tool {fn.name}",
                attributes=_tool_attrs(convention, fn.name, call.id, fn.arguments),
            ) as span:
                result = str(TOOLS[fn.name](**json.loads(fn.arguments)))
                span.set_attribute(_result_attr(convention), result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def test_spans_that_are_traces_of_their_own_are_detected_together(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """No span around the calls: one run per span (one trace each), all in one session,
    so a poll of the same job again and again is detected (it never was: each run's
    detector state was its own), and polls of different jobs are not."""
    different = [Reply(calls=[(f"p{i}", "poll", {"job": str(i)})], usage=(3, 1)) for i in range(5)]
    same = [Reply(calls=[(f"q{i}", "poll", {"job": "42"})], usage=(3, 1)) for i in range(5)]
    for app in _app(
        stack, instrumentation, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    ):
        # one server for both: its response ids stay unique, as a provider's are
        with ScriptedServer(
            [*different, Reply("done", usage=(3, 1)), *same, Reply("done", usage=(3, 1))]
        ) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            _bare_calls(client, app.tracer, app.convention, 6)
            assert stack.recorder.of("on_loop_detected") == []
            _bare_calls(client, app.tracer, app.convention, 6)
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn", "stop"]
    starts = stack.recorder.of("on_run_start")
    assert len(starts) == 6 + 5 + 6 + 5  # a run per model span and per tool span
    assert len({s.session_id for s in starts}) == 1
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_a_server_answering_with_one_id_loses_no_call(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """Every response with the same id (a mock, some local servers): separate requests are
    separate calls, inside a trace and as traces of one span (dropping by id lost them)."""
    script = [
        Reply(calls=[("c1", "add", {"a": 1, "b": 2})], usage=(5, 1), response_id="x"),
        Reply("3", usage=(7, 2), response_id="x"),
    ]
    for app in _app(stack, instrumentation):
        with ScriptedServer(script) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            run_agent(client, app.tracer, app.convention, "add")
            _bare_calls(client, app.tracer, app.convention, 2)
            served = len(server.requests)
    assert served == 3  # two in the agent, one bare (answered without tools)
    assert len(stack.recorder.of("on_stream_success")) == 3
    assert_contract(stack.recorder.events)


def test_group_by_agent_ignores_spans_outside_agents(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """group_by="agent": model spans with no agent ancestor are not reported."""
    for app in _app(stack, instrumentation, group_by="agent"):
        with ScriptedServer(SCRIPT) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            run_agent(client, app.tracer, app.convention, "add", agent_span=False)
    assert stack.recorder.events == []


def test_a_streamed_call_is_reported_with_its_usage(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """stream=True: one model call, usage from the final chunk, time to first token."""
    for app in _app(stack, instrumentation):
        with ScriptedServer([Reply("the answer is three", usage=(9, 5))]) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            assert (
                run_agent(client, app.tracer, app.convention, "q", stream=True).strip()
                == "the answer is three"
            )
    stack.check_run(usage=Usage(input_tokens=9, output_tokens=5), chats=1, tools=0)
    (success,) = stack.recorder.of("on_stream_success")
    assert success.time_to_first_token_ms is not None


def test_a_runaway_loop_is_detected_but_not_stopped(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """The processor reports the detector's stop verdict; the app's run goes on (it cannot
    stop it) and ends completed; the detections are counted in Prometheus."""
    poll = [Reply(calls=[(f"p{i}", "poll", {"job": "42"})], usage=(3, 1)) for i in range(6)]
    for app in _app(
        stack, instrumentation, detectors=[RepetitionDetector(warn_after=2, stop_after=4)]
    ):
        with ScriptedServer([*poll, Reply("gave up", usage=(3, 1))]) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            assert run_agent(client, app.tracer, app.convention, "wait for 42") == "gave up"
    assert_contract(stack.recorder.events)
    # a stop clears the detector's window: the loop going on is warned about again
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn", "stop", "warn"]
    assert stack.recorder.of("on_run_end")[0].status == "completed"
    assert len(stack.recorder.of("on_tool_post")) == 6
    assert stack.prom("loopobs_loop_detections_total", loopobs_detection_action="stop") == 1
    stack.check_nothing_open()


def test_a_failing_tool_and_agent_end_the_run_failed(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """A tool raising inside its span: failed attempt, failed run, nothing left open."""
    for app in _app(stack, instrumentation):
        with ScriptedServer([Reply(calls=[("e1", "explode", {"x": 1})], usage=(2, 2))]) as srv:
            client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
            with pytest.raises(ValueError, match="bad input 1"):
                run_agent(client, app.tracer, app.convention, "go")
    assert_contract(stack.recorder.events)
    (post,) = stack.recorder.of("on_tool_post")
    assert post.is_error
    assert isinstance(post.error, ToolExecutionError)
    assert post.error.error_type == "ValueError"
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "failed"
    stack.check_nothing_open()


async def test_a_cancelled_agent_leaves_nothing_open(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """An async app cancelled in a tool: the run ends with its spans and nothing stays open.

    OpenTelemetry records no error for a cancellation (a ``BaseException``), so the
    spans, and the run read from them, end without one.
    """
    for app in _app(stack, instrumentation):
        with ScriptedServer([Reply(calls=[("w1", "wait", {})], usage=(2, 1))]) as server:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
            started = asyncio.Event()
            task = asyncio.create_task(run_agent_async(client, app.tracer, app.convention, started))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.close()
    assert_contract(stack.recorder.events)
    assert len(stack.recorder.of("on_tool_post")) == 1
    assert len(stack.recorder.of("on_run_end")) == 1
    stack.check_nothing_open()


def test_shutdown_ends_runs_still_open(stack: Stack) -> None:
    """A provider shut down mid-run: the processor ends the run cancelled, gauge back to 0."""
    processor = GenAISpanProcessor(stack.observers)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    span = provider.get_tracer("app").start_span(
        "invoke_agent x", attributes={"gen_ai.operation.name": "invoke_agent"}
    )
    assert processor.open_runs == 1
    assert stack.prom("loopobs_runs_active") == 1
    provider.shutdown()
    span.end()
    assert processor.open_runs == 0
    assert stack.recorder.of("on_run_end")[0].status == "cancelled"
    assert_contract(stack.recorder.events)
    # spans of the shut-down provider feed no observer any more (they did)
    count = len(stack.recorder.events)
    tracer = provider.get_tracer("app")
    with (
        tracer.start_as_current_span(
            "invoke_agent y", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
        tracer.start_as_current_span("chat m", attributes=_CHAT),
    ):
        pass
    assert len(stack.recorder.events) == count
    assert processor.open_runs == 0


class _Broken(EventSink):
    def on_event(self, ctx: EventContext) -> None:
        raise RuntimeError("observer bug")


def test_observer_failures_never_reach_the_app(
    stack: Stack, instrumentation: Instrumented, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer raising on every event: the app's run and spans are unaffected."""
    caplog.set_level(logging.CRITICAL, logger="loopobs.observer")
    processor = GenAISpanProcessor([_Broken(), *stack.observers])
    app = App(instrumentation, processor)
    with ScriptedServer(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        assert run_agent(client, app.tracer, app.convention, "add") == "3 and 7"
    app.close()
    assert processor.observers.failure_count == len(stack.recorder.events)
    assert len(app.spans.get_finished_spans()) == 5
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)


def test_loopobs_spans_on_the_same_provider_are_ignored(
    stack: Stack, instrumentation: Instrumented
) -> None:
    """The tracing observer writing into the app's own provider does not feed back, and its
    run span starts a trace of its own instead of nesting under the app's spans."""
    processor = GenAISpanProcessor([stack.recorder])
    app = App(instrumentation, processor)
    processor.observers.add(TracingObserver(app.provider))
    with ScriptedServer(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        run_agent(client, app.tracer, app.convention, "add")
    app.close()
    assert len(stack.recorder.of("on_run_start")) == 1
    ours = [
        s
        for s in app.spans.get_finished_spans()
        if s.instrumentation_scope and s.instrumentation_scope.name == "loopobs"
    ]
    agents = [s for s in ours if s.name.startswith("invoke_agent")]
    assert len(agents) == 1
    assert agents[0].parent is None


def test_importing_without_the_sdk_gives_the_install_hint() -> None:
    """Without opentelemetry-sdk, importing the adapter fails with a one-line pip hint."""
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "try:\n    import loopobs.adapters.otel\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert out.count("\n") == 1
    assert "pip install 'loopobs[otel-adapter]'" in out


def test_openinference_langchain_instrumentation_feeds_the_processor(stack: Stack) -> None:
    """A LangGraph ReAct run instrumented by OpenInference's LangChain instrumentor (CHAIN,
    LLM and TOOL spans, no GenAI attributes) is one run with exact usage and paired tools."""
    from langchain_core.tools import tool
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from tests._langgraph_app import ai, fake_model, react_graph

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    provider = TracerProvider()
    provider.add_span_processor(GenAISpanProcessor(stack.observers))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        graph = react_graph(
            fake_model(
                [
                    ai(
                        calls=[("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 3, "b": 4}, "c2")],
                        usage=(12, 7),
                    ),
                    ai("3 and 7", usage=(30, 4)),
                ]
            ),
            [add],
        )
        graph.invoke({"messages": [("user", "add")]})
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)
    posts = {c.tool_call_id: c.result for c in stack.recorder.of("on_tool_post")}
    assert posts == {"c1": "3", "c2": "7"}
    assert len(stack.recorder.of("on_tool_call_received")) == 2


def _bare_app(processor: GenAISpanProcessor) -> tuple[TracerProvider, Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, provider.get_tracer("app")


_CHAT: dict[str, AttributeValue] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "m",
    "gen_ai.usage.input_tokens": 3,
    "gen_ai.usage.output_tokens": 1,
}


def test_a_root_ending_before_its_chat_child_leaves_no_run_open(stack: Stack) -> None:
    """A request span that ends before the model call it started: the trace's run waits for
    the call, reports it, then ends; 300 such traces leave no run open and the gauge at 0."""
    processor = GenAISpanProcessor(stack.observers)
    provider, tracer = _bare_app(processor)
    for _ in range(300):
        root = tracer.start_span("POST /ask")
        chat = tracer.start_span("chat m", context=set_span_in_context(root), attributes=_CHAT)
        root.end()
        chat.end()
    assert processor.open_runs == 0
    assert processor.tracker.active_runs == 0
    assert stack.prom("loopobs_runs_active") == 0
    ends = stack.recorder.of("on_run_end")
    assert len(ends) == 300
    assert {e.status for e in ends} == {"completed"}
    assert {e.input_tokens for e in ends} == {3}
    assert_contract(stack.recorder.events)
    provider.shutdown()


def test_an_agent_ending_before_its_chat_child_reports_the_call_in_its_run(stack: Stack) -> None:
    processor = GenAISpanProcessor(stack.observers)
    provider, tracer = _bare_app(processor)
    agent = tracer.start_span(
        "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
    )
    chat = tracer.start_span("chat m", context=set_span_in_context(agent), attributes=_CHAT)
    agent.end()
    assert processor.open_runs == 1
    chat.end()
    assert processor.open_runs == 0
    (end,) = stack.recorder.of("on_run_end")
    assert (end.status, end.input_tokens) == ("completed", 3)
    assert_contract(stack.recorder.events)
    provider.shutdown()


def test_spans_that_never_end_keep_a_bounded_number_of_runs_open(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent spans whose chat child never ends: the oldest followed spans are forgotten as if
    they had ended, so open runs stay under the bound, and shutdown ends the rest."""
    import loopobs.adapters.otel as otel_adapter

    monkeypatch.setattr(otel_adapter, "_MAX_SPANS", 50)
    processor = GenAISpanProcessor(stack.observers)
    provider, tracer = _bare_app(processor)
    for _ in range(400):
        agent = tracer.start_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
        )
        tracer.start_span("chat m", context=set_span_in_context(agent), attributes=_CHAT)
        agent.end()
        assert processor.open_runs <= 50
    processor.shutdown()
    assert processor.open_runs == 0
    assert stack.prom("loopobs_runs_active") == 0
    assert len(stack.recorder.of("on_run_end")) == 400
    assert_contract(stack.recorder.events)
    provider.shutdown()


def test_malformed_attributes_are_skipped_and_the_run_still_ends(stack: Stack) -> None:
    """NaN and infinite token counts, ``parts: 5`` and tool arguments nested too deep to parse:
    the call is still a success, the tool still an attempt, the run ends completed, and each
    bad attribute is counted."""
    processor = GenAISpanProcessor(stack.observers, detectors=[])
    provider, tracer = _bare_app(processor)
    agent = tracer.start_span(
        "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
    )
    inside = set_span_in_context(agent)
    chat = tracer.start_span(
        "chat m",
        context=inside,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": float("nan"),
            "gen_ai.usage.output_tokens": float("inf"),
            "gen_ai.response.time_to_first_chunk": float("nan"),
            "gen_ai.output.messages": '[{"role": "assistant", "parts": 5}]',
        },
    )
    chat.end()
    deep = "[" * 100_000 + "]" * 100_000
    tool = tracer.start_span(
        "execute_tool t",
        context=inside,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "t",
            "gen_ai.tool.call.arguments": deep,
            "gen_ai.tool.call.result": "ok",
        },
    )
    tool.end()
    agent.end()
    assert processor.open_runs == 0
    rec = stack.recorder
    assert len(rec.of("on_stream_success")) == 1
    assert rec.of("on_stream_failure") == []
    (ok,) = rec.of("on_stream_success")
    assert (ok.input_tokens, ok.output_tokens, ok.time_to_first_token_ms) == (0, 0, None)
    (post,) = rec.of("on_tool_post")
    assert not post.is_error
    (end,) = rec.of("on_run_end")
    assert end.status == "completed"
    assert processor.skipped_attributes == 5
    assert processor.tracker.rejected_token_counts == 2
    assert_contract(rec.events)
    stack.check_nothing_open()
    provider.shutdown()


def test_run_of_finds_the_run_of_the_current_span_for_a_stop_hook() -> None:
    """run_of(): what a framework hook (CrewAI's, AG2's) asks before a model call; once the
    policy stopped the run, raise_if_stopped raises its RunStopped."""
    from opentelemetry import trace

    from loopobs.adapters import RunStopped

    provider = TracerProvider()
    processor = GenAISpanProcessor([], detectors=[RepetitionDetector(warn_after=2, stop_after=2)])
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    assert processor.run_of() is None  # no span, no run
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    with tracer.start_as_current_span("invoke_agent a", attributes=agent):
        run = processor.run_of()
        assert run is not None
        assert run.stopped is None
        for n in range(2):
            with tracer.start_as_current_span("execute_tool t") as tool:
                tool.set_attributes(_tool_attrs("genai", "t", f"c{n}", '{"x": 1}'))
                tool.set_attribute("gen_ai.tool.call.result", "same")
                assert processor.run_of() is run  # a tool span reports into the agent's run
        with pytest.raises(RunStopped):
            run.raise_if_stopped()
        assert processor.run_of(trace.get_current_span()) is run
    assert processor.run_of() is None
    provider.shutdown()


def _autogen_run(
    tracer: Tracer, jobs: list[str], *, usage: tuple[int, int] = (3, 1), content: bool = True
) -> None:
    """The spans autogen-core 0.7.5 writes for an AssistantAgent's run (create_agent in a
    trace of its own, then invoke_agent; tool spans with the call id only, no content), and
    OpenInference's OpenAI spans of the model calls under the agent's span."""
    autogen = {"gen_ai.system": "autogen", "gen_ai.agent.name": "calc"}
    with tracer.start_as_current_span(
        "create_agent calc", attributes={"gen_ai.operation.name": "create_agent", **autogen}
    ):
        pass
    with tracer.start_as_current_span(
        "invoke_agent calc", attributes={"gen_ai.operation.name": "invoke_agent", **autogen}
    ):
        for n, job in enumerate([*jobs, ""]):
            llm: dict[str, AttributeValue] = {
                "openinference.span.kind": "LLM",
                "llm.system": "openai",
                "llm.model_name": "gpt-test",
                "llm.token_count.prompt": usage[0],
                "llm.token_count.completion": usage[1],
                "llm.output_messages.0.message.role": "assistant",
            }
            if job and content:
                call = "llm.output_messages.0.message.tool_calls.0.tool_call."
                llm |= {
                    call + "id": f"p{n}",
                    call + "function.name": "poll",
                    call + "function.arguments": json.dumps({"job": job}),
                }
            with tracer.start_as_current_span("ChatCompletion", attributes=llm):
                pass
            if job:
                tool = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.system": "autogen",
                    "gen_ai.tool.name": "poll",
                    "gen_ai.tool.call.id": f"p{n}",
                }
                with tracer.start_as_current_span("execute_tool poll", attributes=tool):
                    pass


@pytest.mark.parametrize("group_by", ["trace", "agent"])
def test_autogen_agentchats_spans_are_one_named_run_with_the_models_arguments(
    stack: Stack, group_by: Literal["trace", "agent"]
) -> None:
    """AutoGen's tool spans carry no content: the arguments are the model's calls', matched by
    call id, so six polls of one job are a runaway and six jobs are not; create_agent (a trace
    of its own, no GenAI child) is no run. Tests/test_otel_bridge_autogen.py drives the real
    package."""
    processor = GenAISpanProcessor(stack.observers, group_by=group_by)
    provider, tracer = _bare_app(processor)
    _autogen_run(tracer, [str(n) for n in range(6)], usage=(12, 7))
    _autogen_run(tracer, ["42"] * 6)
    _autogen_run(tracer, ["42"] * 6, content=False)
    provider.shutdown()
    events = stack.recorder
    assert [c.agent for c in events.of("on_run_start")] == ["calc"] * 3
    assert [e.input_tokens for e in events.of("on_run_end")] == [12 * 7, 3 * 7, 3 * 7]
    assert [e.output_tokens for e in events.of("on_run_end")] == [7 * 7, 7, 7]
    assert len(events.of("on_stream_success")) == 21
    assert [c.tool for c in events.of("on_tool_post")] == ["poll"] * 18
    received = [dict(c.input) for c in events.of("on_tool_call_received")]
    assert received == [{"job": str(n)} for n in range(6)] + [{"job": "42"}] * 6 + [{}] * 6
    detections = events.of("on_loop_detected")
    assert len({d.run_id for d in detections}) == 1  # the second run only
    assert detections[0].run_id == events.of("on_run_start")[1].run_id
    assert processor.open_runs == 0
    assert_contract(events.events)
