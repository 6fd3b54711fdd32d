"""TracingObserver: exact span trees from hand-emitted runs, on in-memory OTel providers."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from loopobs.contract import trace_links
from loopobs.contract.errors import Cancelled, RateLimited
from loopobs.contract.events import RunStatus, ToolPreContext
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters import content
from loopobs.exporters.content import ContentMode
from loopobs.exporters.tracing import TracingObserver
from tests._emit import MS, T0, Script, failed_run, full_run, parked_run


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def sid(span: ReadableSpan) -> int:
    assert span.context is not None
    span_id: int = span.context.span_id
    return span_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


@pytest.fixture(autouse=True)
def _no_detach_errors(caplog: pytest.LogCaptureFixture) -> Any:
    """No test may make OpenTelemetry log a context or span-end problem."""
    caplog.set_level(logging.WARNING)
    yield
    # Exporter threads left retrying by other tests' outage checks may log into any
    # test; what this guards against is logged by the SDK on the test's own thread.
    bad = [
        r
        for r in caplog.records
        if r.name.startswith("opentelemetry")
        and not r.name.startswith("opentelemetry.exporter")
        and r.thread == threading.get_ident()
    ]
    assert not bad, [r.getMessage() for r in bad]


async def test_full_run_gives_the_exact_span_tree(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    s = await full_run(obs, agent="calc")
    spans = by_name(span_exporter)
    assert sorted((k, len(v)) for k, v in spans.items()) == [
        ("chat m1", 1),
        ("chat m2", 2),
        ("execute_tool add", 1),
        ("execute_tool div", 1),
        ("invoke_agent calc", 1),
        ("turn", 2),
    ]
    (run,) = spans["invoke_agent calc"]
    turn0, turn1 = sorted(spans["turn"], key=lambda sp: attrs(sp)[c.LOOPOBS_TURN_INDEX])
    (failed_chat,) = spans["chat m1"]
    ok0, ok1 = sorted(spans["chat m2"], key=lambda sp: sp.start_time or 0)
    (add,) = spans["execute_tool add"]
    (div,) = spans["execute_tool div"]

    # kinds, parents, one trace
    assert run.kind is SpanKind.INTERNAL
    assert run.parent is None
    assert {sp.context.trace_id for sp in span_exporter.get_finished_spans()} == {
        run.context.trace_id
    }
    assert [parent_id(t) for t in (turn0, turn1)] == [sid(run)] * 2
    assert [parent_id(x) for x in (failed_chat, ok0, add, div)] == [sid(turn0)] * 4
    assert parent_id(ok1) == sid(turn1)
    assert {sp.kind for sp in (failed_chat, ok0, ok1)} == {SpanKind.CLIENT}
    assert {sp.kind for sp in (turn0, add, div)} == {SpanKind.INTERNAL}

    # statuses: the recovered failure fails only its own chat span
    assert failed_chat.status.status_code is StatusCode.ERROR
    assert attrs(failed_chat)[c.ERROR_TYPE] == "RateLimited"
    assert div.status.status_code is StatusCode.ERROR
    assert attrs(div)[c.ERROR_TYPE] == "ToolExecutionError"
    for sp in (run, turn0, turn1, ok0, ok1, add):
        assert sp.status.status_code is StatusCode.UNSET, sp.name
        assert c.ERROR_TYPE not in attrs(sp)

    # attributes
    assert attrs(run) == {
        c.GEN_AI_OPERATION_NAME: "invoke_agent",
        c.GEN_AI_AGENT_NAME: "calc",
        c.GEN_AI_CONVERSATION_ID: str(s.session_id),
        c.LOOPOBS_RUN_ID: str(s.run_id),
        c.GEN_AI_REQUEST_MODEL: "m1",
        c.LOOPOBS_RUN_STATUS: "completed",
        c.LOOPOBS_RUN_TOTAL_TURNS: 2,
        c.GEN_AI_USAGE_INPUT_TOKENS: 150,
        c.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 10,
        c.GEN_AI_PROVIDER_NAME: "scripted",
        c.LOOPOBS_RUN_LOOP_DETECTED: True,  # it warned
        c.LOOPOBS_RUN_BUDGET_STOPPED: False,
    }  # no reasoning tokens: the conventions list none on invoke_agent
    assert attrs(ok0) == {
        c.GEN_AI_OPERATION_NAME: "chat",
        c.GEN_AI_REQUEST_MODEL: "m2",
        c.GEN_AI_REQUEST_STREAM: True,
        c.GEN_AI_CONVERSATION_ID: str(s.session_id),
        c.LOOPOBS_ATTEMPT: 1,
        c.GEN_AI_PROVIDER_NAME: "scripted",
        c.GEN_AI_RESPONSE_MODEL: "m2-2026",
        c.GEN_AI_USAGE_INPUT_TOKENS: 100,
        c.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        c.GEN_AI_RESPONSE_ID: "resp-0-1",
        c.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",),
        c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 10,
        c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 5,
        c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 0.15,
    }
    assert attrs(add) == {
        c.GEN_AI_OPERATION_NAME: "execute_tool",
        c.GEN_AI_TOOL_NAME: "add",
        c.GEN_AI_TOOL_CALL_ID: "call-a",
        c.GEN_AI_TOOL_TYPE: "function",
        c.LOOPOBS_ATTEMPT: 0,
        c.LOOPOBS_TOOL_OUTCOME: "output",
        c.LOOPOBS_TOOL_RESULT_HASH: "fedcba9876543210",
    }
    assert attrs(div)[c.LOOPOBS_TOOL_OUTCOME] == "error"
    assert attrs(turn0) == {
        c.LOOPOBS_TURN_INDEX: 0,
        c.LOOPOBS_TURN_INPUT_TOKENS: 100,
        c.LOOPOBS_TURN_OUTPUT_TOKENS: 20,
    }

    # span events, with their fields
    assert events(run) == [
        (
            c.EVENT_COMPACTION,
            {
                c.LOOPOBS_COMPACTION_TOKENS_BEFORE: 9000,
                c.LOOPOBS_COMPACTION_TOKENS_AFTER: 3000,
                c.LOOPOBS_COMPACTION_TOKENS_SAVED: 6000,
                c.LOOPOBS_COMPACTION_MESSAGES_REMOVED: 7,
                c.LOOPOBS_COMPACTION_REASON: "threshold",
            },
        )
    ]
    assert events(turn0) == [
        (
            c.EVENT_FALLBACK,
            {c.LOOPOBS_MODEL_FROM: "m1", c.LOOPOBS_MODEL_TO: "m2", c.LOOPOBS_TURN_INDEX: 0},
        ),
        (c.EVENT_MODEL_SWITCHED, {c.LOOPOBS_MODEL_FROM: "m1", c.LOOPOBS_MODEL_TO: "m2"}),
        (
            c.EVENT_LOOP_DETECTED,
            {
                c.LOOPOBS_DETECTION_PATTERN: "add(…)",  # no arguments: content
                c.LOOPOBS_DETECTION_REPETITIONS: 3,
                c.LOOPOBS_DETECTION_ACTION: "warn",
                c.GEN_AI_TOOL_NAME: "add",
            },
        ),
    ]
    assert events(turn1) == [
        (
            c.EVENT_CONVERGENCE_DETECTED,
            {
                c.LOOPOBS_DETECTION_ACTION: "stop",
                c.LOOPOBS_DETECTION_SIMILARITY: 0.97,
                c.LOOPOBS_DETECTION_CONSECUTIVE: 3,
            },
        )
    ]

    # times are the events' times (a replayed log gives identical spans)
    assert run.start_time == s.times[0]
    assert run.end_time == s.times[-1]
    assert failed_chat.end_time is not None
    assert failed_chat.start_time is not None
    assert failed_chat.end_time - failed_chat.start_time == MS
    assert obs.open_runs == 0
    assert obs.open_spans() == 0
    assert trace_links.lookup(s.run_id) is None


async def test_run_publishes_its_trace_while_open(tracer_provider: TracerProvider) -> None:
    obs = TracingObserver(tracer_provider)
    s = Script(obs)
    s.run_start()
    pair = trace_links.lookup(s.run_id)
    assert pair is not None
    assert len(pair[0]) == 32
    assert len(pair[1]) == 16
    s.run_end()
    assert trace_links.lookup(s.run_id) is None
    assert trace_links.resolve(s.run_id) == pair


async def test_without_turn_spans_calls_sit_under_the_run(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    await full_run(TracingObserver(tracer_provider, turn_spans=False))
    spans = by_name(span_exporter)
    assert "turn" not in spans
    (run,) = spans["invoke_agent agent"]
    children = [sp for sp in span_exporter.get_finished_spans() if sp is not run]
    assert len(children) == 5
    assert {parent_id(sp) for sp in children} == {sid(run)}
    assert [e[0] for e in events(run)] == [
        c.EVENT_COMPACTION,
        c.EVENT_FALLBACK,
        c.EVENT_MODEL_SWITCHED,
        c.EVENT_LOOP_DETECTED,
        c.EVENT_CONVERGENCE_DETECTED,
    ]


async def test_failed_turn_and_run_are_errors(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    await failed_run(TracingObserver(tracer_provider))
    spans = by_name(span_exporter)
    for name, etype in (
        ("chat m1", "RateLimited"),
        ("turn", "FallbackExhausted"),
        ("invoke_agent agent", "FallbackExhausted"),
    ):
        (sp,) = spans[name]
        assert sp.status.status_code is StatusCode.ERROR, name
        assert attrs(sp)[c.ERROR_TYPE] == etype
    assert spans["invoke_agent agent"][0].status.description == "every model failed"
    assert attrs(spans["invoke_agent agent"][0])[c.LOOPOBS_RUN_STATUS] == "failed"


@pytest.mark.parametrize("sleep", [False, True])
async def test_parking_is_an_event_not_an_error(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, sleep: bool
) -> None:
    await parked_run(TracingObserver(tracer_provider), sleep=sleep)
    spans = by_name(span_exporter)
    (run,) = spans["invoke_agent agent"]
    (turn,) = spans["turn"]
    assert run.status.status_code is StatusCode.UNSET
    assert turn.status.status_code is StatusCode.UNSET
    assert attrs(run)[c.LOOPOBS_RUN_STATUS] == ("sleeping" if sleep else "suspended")
    expected = (
        (
            c.EVENT_SLEEP,
            {
                c.GEN_AI_TOOL_NAME: "approve",
                c.GEN_AI_TOOL_CALL_ID: "call-p",
                c.LOOPOBS_PARK_WAKE_AT: "2030-01-01T00:00:00+00:00",
            },
        )
        if sleep
        else (
            c.EVENT_SUSPENDED,
            {
                c.GEN_AI_TOOL_NAME: "approve",
                c.GEN_AI_TOOL_CALL_ID: "call-p",
                c.LOOPOBS_PARK_REASON: "needs approval",
                c.LOOPOBS_PARK_KIND: "human",
            },
        )
    )
    assert events(turn) == [expected]
    (tool,) = spans["execute_tool approve"]
    assert attrs(tool)[c.LOOPOBS_TOOL_OUTCOME] == ("sleep" if sleep else "suspend")


async def test_fifty_concurrent_runs_give_fifty_complete_traces(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    scripts = await asyncio.gather(
        *(full_run(obs, agent=f"a{i % 5}", t0=T0 + i) for i in range(50))
    )
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 50 * 8
    traces: dict[int, list[ReadableSpan]] = {}
    for sp in spans:
        traces.setdefault(sp.context.trace_id, []).append(sp)
    assert len(traces) == 50
    run_ids = set()
    for members in traces.values():
        roots = [sp for sp in members if sp.parent is None]
        assert len(roots) == 1
        ids = {sid(sp) for sp in members}
        assert all(parent_id(sp) in ids for sp in members if sp.parent is not None)
        assert sorted(sp.name.split()[0] for sp in members) == [
            "chat",
            "chat",
            "chat",
            "execute_tool",
            "execute_tool",
            "invoke_agent",
            "turn",
            "turn",
        ]
        # every span of a trace carries its own run's session
        root = roots[0]
        run_ids.add(attrs(root)[c.LOOPOBS_RUN_ID])
        chats = [sp for sp in members if sp.name.startswith("chat")]
        assert {attrs(sp)[c.GEN_AI_CONVERSATION_ID] for sp in chats} == {
            attrs(root)[c.GEN_AI_CONVERSATION_ID]
        }
    assert run_ids == {str(s.run_id) for s in scripts}
    assert obs.open_runs == 0
    assert obs.open_spans() == 0


async def test_cancellation_mid_tool_leaves_no_open_span(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    started = asyncio.Event()

    async def run() -> None:
        s = Script(obs)
        s.run_start()
        s.turn_start(0)
        try:
            s.stream_start(0, "m1")
            s.stream_success(0, "m1", finish="tool_calls")

            async def body() -> None:
                started.set()
                await asyncio.sleep(3600)

            await s.tool_task(0, "wait", "call-w", body, error=Cancelled())
        finally:
            s.turn_end(0, success=False, error=Cancelled())
            s.run_end(success=False, status=RunStatus.CANCELLED, error=Cancelled(), turns=1)

    task = asyncio.create_task(run())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = by_name(span_exporter)
    assert len(span_exporter.get_finished_spans()) == 4
    assert attrs(spans["execute_tool wait"][0])[c.ERROR_TYPE] == "Cancelled"
    assert spans["invoke_agent agent"][0].status.status_code is StatusCode.ERROR
    assert attrs(spans["invoke_agent agent"][0])[c.ERROR_TYPE] == "Cancelled"
    assert obs.open_spans() == 0


async def test_run_end_closes_what_a_careless_emitter_left_open(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    s = Script(obs)
    s.run_start()
    s.turn_start(0)
    s.stream_start(0, "m1")  # never ends
    s.tool_pre(0, "t", "call-1")  # never ends
    s.turn_start(1)  # turn 0 never ends
    s.run_end(success=False, status=RunStatus.FAILED, error=RateLimited("x"))
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 5
    assert {sp.end_time for sp in spans} == {s.times[-1]}
    assert all(sp.status.status_code is StatusCode.ERROR for sp in spans)
    assert obs.open_runs == 0
    # late and duplicate events for the ended run are ignored
    s.tool_post(0, "t", "call-1")
    s.turn_end(0)
    s.run_end()
    assert len(span_exporter.get_finished_spans()) == 5


class Boom(LoopObserver):
    def on_tool_pre(self, ctx: ToolPreContext) -> None:
        raise RuntimeError("boom")


async def test_a_failing_observer_elsewhere_does_not_break_the_tree(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    observers = ObserverSet([Boom(), TracingObserver(tracer_provider)])
    with caplog.at_level(logging.CRITICAL, logger="loopobs.observer"):
        await full_run(observers)
    assert len(span_exporter.get_finished_spans()) == 8
    assert observers.failures == {("Boom", "on_tool_pre"): 2}


async def test_user_spans_nest_under_tool_and_chat_spans(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    user_tracer = tracer_provider.get_tracer("user")

    async def tool_body() -> None:
        with user_tracer.start_as_current_span("user work"):
            await asyncio.sleep(0)

    s = Script(obs)
    before = trace.get_current_span()
    s.run_start()
    s.turn_start(0)
    s.stream_start(0, "m1")
    with user_tracer.start_as_current_span("HTTP POST"):
        pass
    s.stream_success(0, "m1", finish="tool_calls")
    assert trace.get_current_span() is before
    await s.tool_task(0, "add", "call-a", tool_body)
    assert trace.get_current_span() is before
    s.turn_end(0)
    s.run_end()
    spans = by_name(span_exporter)
    assert parent_id(spans["HTTP POST"][0]) == sid(spans["chat m1"][0])
    assert parent_id(spans["user work"][0]) == sid(spans["execute_tool add"][0])


async def test_end_event_from_another_task_never_fails_to_detach(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    s = Script(obs)
    s.run_start()
    s.turn_start(0)

    async def pre() -> None:
        s.tool_pre(0, "t", "call-1")
        s.stream_start(0, "m1")

    async def post() -> None:
        s.tool_post(0, "t", "call-1")
        s.stream_success(0, "m1")

    await asyncio.create_task(pre())
    await asyncio.create_task(post())
    s.turn_end(0)
    s.run_end()
    assert len(span_exporter.get_finished_spans()) == 4  # and the fixture saw no log


async def test_propagation_can_be_switched_off(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider, propagate_context=False)
    s = Script(obs)
    s.run_start()
    s.turn_start(0)
    s.stream_start(0, "m1")
    assert not trace.get_current_span().get_span_context().is_valid
    s.stream_success(0, "m1")
    s.turn_end(0)
    s.run_end()
    assert len(span_exporter.get_finished_spans()) == 3


async def test_resumed_run_links_to_the_parked_run(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    parked = await parked_run(obs)
    carrier = trace_links.carrier(parked.run_id)
    assert carrier is not None
    # another process: only the checkpoint's carrier is known, under the parked run's id
    parked_id_elsewhere = uuid.uuid4()
    assert trace_links.restore(parked_id_elsewhere, carrier)
    assert not trace_links.restore(uuid.uuid4(), {"traceparent": "garbage"})
    assert not trace_links.restore(uuid.uuid4(), {})
    resumed = Script(obs, session_id=parked.session_id)
    resumed.run_start(resumed_from=parked_id_elsewhere)
    resumed.run_end()
    first, second = (
        sp for sp in span_exporter.get_finished_spans() if sp.name.startswith("invoke_agent")
    )
    (link,) = second.links
    assert link.context.trace_id == first.context.trace_id
    assert link.context.span_id == sid(first)
    assert attrs(second)[c.LOOPOBS_RUN_RESUMED_FROM] == str(parked_id_elsewhere)


# -- content ----------------------------------------------------------------------------------

CONTENT_KEYS = {
    c.GEN_AI_INPUT_MESSAGES,
    c.GEN_AI_OUTPUT_MESSAGES,
    c.GEN_AI_SYSTEM_INSTRUCTIONS,
    c.GEN_AI_TOOL_CALL_ARGUMENTS,
    c.GEN_AI_TOOL_CALL_RESULT,
}


async def test_no_content_by_default(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(content.CAPTURE_CONTENT_ENV, raising=False)
    await full_run(TracingObserver(tracer_provider), instructions="be terse")
    for sp in span_exporter.get_finished_spans():
        assert not CONTENT_KEYS & set(attrs(sp)), sp.name
        assert all(e.name != c.EVENT_INFERENCE_DETAILS for e in sp.events)
        assert "2+2" not in json.dumps(attrs(sp), default=str)


async def test_span_only_content_follows_the_message_schema(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    await full_run(
        TracingObserver(tracer_provider, capture_content="span_only"), instructions="be terse"
    )
    spans = by_name(span_exporter)
    ok0, ok1 = sorted(spans["chat m2"], key=lambda sp: sp.start_time or 0)
    (failed,) = spans["chat m1"]
    user = {"role": "user", "parts": [{"type": "text", "content": "what is 2+2?"}]}
    assert json.loads(attrs(failed)[c.GEN_AI_INPUT_MESSAGES]) == [user]
    assert c.GEN_AI_OUTPUT_MESSAGES not in attrs(failed)
    assert json.loads(attrs(ok0)[c.GEN_AI_SYSTEM_INSTRUCTIONS]) == [
        {"type": "text", "content": "be terse"}
    ]
    calls = [
        {"type": "tool_call", "id": "call-a", "name": "add", "arguments": {"a": 2, "b": 2}},
        {"type": "tool_call", "id": "call-b", "name": "div", "arguments": {"a": 1, "b": 0}},
    ]
    assert json.loads(attrs(ok0)[c.GEN_AI_OUTPUT_MESSAGES]) == [
        {
            "role": "assistant",
            "finish_reason": "tool_call",
            "parts": [
                {"type": "reasoning", "content": "let me add"},
                {"type": "text", "content": "Adding"},
                *calls,
            ],
        }
    ]
    assert json.loads(attrs(ok1)[c.GEN_AI_INPUT_MESSAGES]) == [
        user,
        {"role": "assistant", "parts": [{"type": "text", "content": "Adding"}, *calls]},
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call-a", "response": "4"}],
        },
        {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": "call-b",
                    "response": "error: division by zero",
                }
            ],
        },
    ]
    assert json.loads(attrs(ok1)[c.GEN_AI_OUTPUT_MESSAGES]) == [
        {
            "role": "assistant",
            "finish_reason": "stop",
            "parts": [{"type": "text", "content": "It is 4."}],
        }
    ]
    # the chat span still ends when the stream succeeded, not when the tools ran
    assert ok0.end_time is not None
    assert spans["execute_tool add"][0].start_time is not None
    assert ok0.end_time < spans["execute_tool add"][0].start_time
    (add,) = spans["execute_tool add"]
    (div,) = spans["execute_tool div"]
    assert json.loads(attrs(add)[c.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"a": 2, "b": 2}
    assert attrs(add)[c.GEN_AI_TOOL_CALL_RESULT] == "4"
    assert c.GEN_AI_TOOL_CALL_RESULT not in attrs(div)  # only successful results
    assert all(e.name != c.EVENT_INFERENCE_DETAILS for sp in spans["chat m2"] for e in sp.events)


@pytest.mark.parametrize(("mode", "on_span"), [("EVENT_ONLY", False), ("SPAN_AND_EVENT", True)])
async def test_event_modes_put_content_on_the_details_event(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    on_span: bool,
) -> None:
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, mode.lower())
    await full_run(TracingObserver(tracer_provider), instructions="be terse")
    ok1 = max(by_name(span_exporter)["chat m2"], key=lambda sp: sp.start_time or 0)
    (details,) = [e for e in ok1.events if e.name == c.EVENT_INFERENCE_DETAILS]
    ev = dict(details.attributes or {})
    assert set(ev) == {
        c.GEN_AI_INPUT_MESSAGES,
        c.GEN_AI_OUTPUT_MESSAGES,
        c.GEN_AI_SYSTEM_INSTRUCTIONS,
    }
    assert json.loads(str(ev[c.GEN_AI_OUTPUT_MESSAGES]))[0]["parts"] == [
        {"type": "text", "content": "It is 4."}
    ]
    assert details.timestamp == ok1.end_time
    assert (c.GEN_AI_INPUT_MESSAGES in attrs(ok1)) is on_span


def test_content_mode_parsing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    parse = content.parse_content_mode
    assert parse(None, {}) is ContentMode.NO_CONTENT
    assert (
        parse(None, {content.CAPTURE_CONTENT_ENV: "Span_And_Event"}) is ContentMode.SPAN_AND_EVENT
    )
    assert parse(True) is ContentMode.SPAN_ONLY
    assert parse(False) is ContentMode.NO_CONTENT
    assert parse("true") is ContentMode.SPAN_ONLY
    assert parse(ContentMode.EVENT_ONLY) is ContentMode.EVENT_ONLY
    with caplog.at_level(logging.WARNING, logger="loopobs.exporters.content"):
        assert parse(None, {content.CAPTURE_CONTENT_ENV: "everything"}) is ContentMode.NO_CONTENT
    assert "everything" in caplog.text
    assert "capturing no content" in caplog.text
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, "bogus")
    with caplog.at_level(logging.WARNING, logger="loopobs.exporters.content"):
        assert TracingObserver(trace.NoOpTracerProvider()).content_mode is ContentMode.NO_CONTENT


# -- not recording --------------------------------------------------------------------------------


async def test_sampled_out_runs_skip_attribute_and_content_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def forbidden(*args: object, **kwargs: object) -> str:
        raise AssertionError("content work on a span that is not recording")

    monkeypatch.setattr(content, "dumps", forbidden)
    obs = TracingObserver(provider, capture_content=True)
    observers = ObserverSet([obs], strict=True)
    await full_run(observers)
    await parked_run(observers)
    assert exporter.get_finished_spans() == ()
    assert obs.open_runs == 0
    provider.shutdown()


async def test_api_only_provider_works_without_an_sdk() -> None:
    obs = TracingObserver(trace.NoOpTracerProvider(), capture_content=True)
    s = await full_run(ObserverSet([obs], strict=True))
    assert obs.open_runs == 0
    assert trace_links.lookup(s.run_id) is None


async def test_reset_ends_open_spans(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    obs = TracingObserver(tracer_provider)
    s = Script(obs)
    s.run_start()
    s.turn_start(0)
    s.stream_start(0, "m1")
    obs.shutdown(timeout_s=1.0)
    assert len(span_exporter.get_finished_spans()) == 3
    assert obs.open_runs == 0
    assert trace_links.lookup(s.run_id) is None


# -- a real AgentLoop ------------------------------------------------------------------------


def _script(request: Any) -> Any:
    from loopobs.contract.model import ToolResultMessage
    from loopobs.llm import Reply, ToolCall

    if isinstance(request.messages[-1], ToolResultMessage):
        return Reply(text="done")
    return Reply(tool_calls=(ToolCall("work", {"n": 1}),))


async def test_agent_loop_fifty_concurrent_runs_with_nested_user_spans(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    from loopobs import AgentLoop, tool
    from loopobs.llm import ScriptedClient

    user_tracer = tracer_provider.get_tracer("user")

    @tool
    async def work(n: int) -> int:
        """Do some work."""
        with user_tracer.start_as_current_span("user work"):
            await asyncio.sleep(0)
        return n

    obs = TracingObserver(tracer_provider)
    loop = AgentLoop(ScriptedClient(_script), model="m", tools=[work], observers=[obs])
    results = await asyncio.gather(*(loop.run(f"q{i}") for i in range(50)))
    assert all(r.answer == "done" for r in results)
    spans = span_exporter.get_finished_spans()
    traces: dict[int, list[ReadableSpan]] = {}
    for sp in spans:
        assert sp.context is not None
        traces.setdefault(sp.context.trace_id, []).append(sp)
    assert len(traces) == 50
    for members in traces.values():
        named = {sp.name: sp for sp in members}
        assert sorted(sp.name for sp in members) == [
            "chat m",
            "chat m",
            "execute_tool work",
            "invoke_agent agent",
            "turn",
            "turn",
            "user work",
        ]
        assert parent_id(named["user work"]) == sid(named["execute_tool work"])
    assert obs.open_runs == 0
    assert obs.open_spans() == 0


async def test_agent_loop_cancellation_ends_every_span(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    from loopobs import AgentLoop, tool
    from loopobs.llm import ScriptedClient

    entered = asyncio.Event()

    @tool
    async def work(n: int) -> int:
        """Wait forever."""
        entered.set()
        await asyncio.sleep(3600)
        return n

    obs = TracingObserver(tracer_provider)
    loop = AgentLoop(
        ScriptedClient(_script), model="m", tools=[work], observers=[obs], tool_timeout=None
    )
    task = asyncio.create_task(loop.run("q"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = by_name(span_exporter)
    assert sorted(spans) == ["chat m", "execute_tool work", "invoke_agent agent", "turn"]
    (run,) = spans["invoke_agent agent"]
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)[c.LOOPOBS_RUN_STATUS] == "cancelled"
    assert obs.open_runs == 0
    assert obs.open_spans() == 0


async def test_resumed_run_links_to_the_parked_run_through_the_checkpoint(
    tracer_provider: Any, span_exporter: Any
) -> None:
    """A run resumed from a JSON checkpoint, with no in-process memory of the parked run,
    carries a span link to the parked run's root span."""
    from loopobs import AgentLoop, Checkpoint, Suspend, tool
    from loopobs.llm import Reply, ScriptedClient, ToolCall

    @tool
    def approve(amount: int) -> Suspend:
        """Ask a human."""
        return Suspend("approve?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})

    def make_loop(step: Reply) -> AgentLoop:
        return AgentLoop(
            ScriptedClient([step]),
            model="m1",
            tools=[approve],
            detectors=[],
            observers=[TracingObserver(tracer_provider)],
        )

    parked = await make_loop(Reply(tool_calls=(ToolCall("approve", {"amount": 3}),))).run("pay")
    assert parked.checkpoint is not None
    saved = parked.checkpoint.model_dump_json()
    # another process: nothing about the parked run is remembered but the checkpoint
    trace_links.reset()
    checkpoint = Checkpoint.model_validate_json(saved)
    resumed = await make_loop(Reply(text="paid")).resume(checkpoint, {"ok": True})
    assert resumed.answer == "paid"

    roots = [s for s in span_exporter.get_finished_spans() if s.parent is None]
    first, second = sorted(roots, key=lambda s: s.start_time)
    assert second.context.trace_id != first.context.trace_id
    (link,) = second.links
    assert link.context.trace_id == first.context.trace_id
    assert link.context.span_id == first.context.span_id
    assert (second.attributes or {})[c.LOOPOBS_RUN_RESUMED_FROM] == str(parked.run_id)


def test_without_content_capture_the_chunk_and_content_hooks_are_not_listened_to() -> None:
    """The loop builds no chunk events for tracing alone when content is not captured."""
    content_only = {"on_text_delta", "on_thinking_delta", "on_tool_call_received", "on_response"}
    quiet = ObserverSet([TracingObserver(TracerProvider())])
    assert not content_only & quiet.listening
    assert quiet.listens("on_stream_start")
    capturing = ObserverSet([TracingObserver(TracerProvider(), capture_content=True)])
    assert content_only <= capturing.listening
