"""Context providers: concurrent, each under its timeout, skipped with an event when they fail."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop, ProviderSpec, SystemMessage
from loopobs.exporters import MetricsObserver, TracingObserver
from loopobs.llm.scripted import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, check_contract, metric_points


async def memory(query: str) -> str:
    return f"the user asked about {query}"


async def nothing(query: str) -> str | None:
    return None


async def broken(query: str) -> str:
    raise RuntimeError("the index is down")


async def test_texts_join_each_model_call_as_system_messages_and_not_the_history() -> None:
    client = ScriptedClient([Reply(tool_calls=(ToolCall("noop", {}),)), Reply(text="ok")])

    def noop() -> str:
        return "done"

    rec = RecordingObserver()
    loop = AgentLoop(
        client, model="m", tools=[noop], observers=[rec], context_providers=[memory, nothing]
    )
    result = await loop.run("cats")
    assert result.ok
    for request in client.requests:
        injected = [m for m in request.messages if isinstance(m, SystemMessage)]
        assert [m.content for m in injected] == ["the user asked about cats"]
    assert not any(isinstance(m, SystemMessage) for m in result.messages)
    outcomes = [(c.provider, c.outcome, c.turn) for c in rec.of("on_context_provider")]
    assert outcomes == [
        ("memory", "ok", 0),
        ("nothing", "empty", 0),
        ("memory", "ok", 1),
        ("nothing", "empty", 1),
    ]
    assert check_contract(rec.events) == []
    hooks = rec.hooks()
    assert hooks.index("on_context_provider") == hooks.index("on_turn_start") + 1
    assert hooks.index("on_stream_start") > hooks.index("on_context_provider")


async def test_failing_and_slow_providers_are_skipped_with_an_event() -> None:
    hang = asyncio.Event()  # never set

    async def slow(query: str) -> str:
        await hang.wait()
        return "too late"

    client = ScriptedClient([Reply(text="ok")])
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m",
        observers=[rec],
        context_provider_timeout=0.05,
        context_providers=[broken, ProviderSpec(slow, "slow"), memory],
    )
    result = await loop.run("dogs")
    assert result.ok
    events = {c.provider: c for c in rec.of("on_context_provider")}
    assert events["broken"].outcome == "error"
    assert events["broken"].error.error_type == "RuntimeError"
    assert "index is down" not in str(events["broken"].error)  # its message may be content
    assert events["slow"].outcome == "timeout"
    assert events["memory"].outcome == "ok"
    system = [m.content for m in client.requests[0].messages if isinstance(m, SystemMessage)]
    assert system == ["the user asked about dogs"]


async def test_providers_run_concurrently() -> None:
    """Each provider waits for the other: only concurrent providers both finish."""
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a(query: str) -> str:
        a_started.set()
        await b_started.wait()
        return "a"

    async def b(query: str) -> str:
        b_started.set()
        await a_started.wait()
        return "b"

    client = ScriptedClient([Reply(text="ok")])
    rec = RecordingObserver()
    loop = AgentLoop(
        client, model="m", observers=[rec], context_providers=[a, b], context_provider_timeout=30
    )
    assert (await loop.run("q")).ok
    assert [c.outcome for c in rec.of("on_context_provider")] == ["ok", "ok"]


async def test_spans_under_the_turn_and_a_metric(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    client = ScriptedClient([Reply(text="ok")])
    loop = AgentLoop(
        client,
        model="m",
        context_providers=[memory, broken],
        observers=[TracingObserver(tracer_provider), MetricsObserver(meter_provider)],
    )
    assert (await loop.run("secret topic")).ok
    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    turn = spans["turn"]
    ok, failed = spans["context_provider memory"], spans["context_provider broken"]
    assert ok.parent is not None
    assert ok.parent.span_id == turn.context.span_id
    ok_attrs, failed_attrs = dict(ok.attributes or {}), dict(failed.attributes or {})
    assert ok_attrs["loopobs.context_provider.outcome"] == "ok"
    assert "loopobs.context_provider.text" not in ok_attrs  # content: off by default
    assert failed_attrs["error.type"] == "error"
    assert turn.start_time is not None
    assert ok.start_time is not None
    assert ok.end_time is not None
    assert spans["chat m"].start_time is not None
    assert turn.start_time <= ok.start_time <= ok.end_time <= spans["chat m"].start_time
    points = {
        p.attributes["loopobs.context_provider.name"]: p
        for p in metric_points(metric_reader)["loopobs.context_provider.duration"]
    }
    assert points["memory"].attributes["loopobs.context_provider.outcome"] == "ok"
    assert points["broken"].attributes["loopobs.context_provider.outcome"] == "error"


async def test_provider_text_on_spans_only_with_content_capture(
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    loop = AgentLoop(
        ScriptedClient([Reply(text="ok")]),
        model="m",
        context_providers=[memory],
        observers=[TracingObserver(tracer_provider, capture_content=True)],
    )
    assert (await loop.run("birds")).ok
    span = next(
        s for s in span_exporter.get_finished_spans() if s.name == "context_provider memory"
    )
    assert (
        dict(span.attributes or {})["loopobs.context_provider.text"] == "the user asked about birds"
    )


async def test_a_cancelled_run_cancels_its_providers() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def waits(query: str) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ""

    rec = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient([Reply(text="ok")]),
        model="m",
        observers=[rec],
        context_providers=[waits],
        context_provider_timeout=None,
    )
    task = asyncio.create_task(loop.run("q"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
    assert check_contract(rec.events) == []
    assert rec.of("on_run_end")[0].status == "cancelled"


def test_check_contract_knows_providers_and_session_events() -> None:
    """A provider event after the turn's stream began, or a session event carrying a run's
    id, breaks the contract; the loop's own stream of a session keeps it."""
    import time
    import uuid

    from loopobs import (
        BackpressureContext,
        ContextProviderContext,
        EventContext,
        RunEndContext,
        RunStartContext,
        RunStatus,
        StreamStartContext,
        StreamSuccessContext,
        TurnEndContext,
        TurnStartContext,
    )

    run, session = uuid.uuid4(), uuid.uuid4()
    now = time.time_ns()

    def provider() -> ContextProviderContext:
        return ContextProviderContext(run_id=run, time_ns=now, turn=0, provider="p")

    def stream(ok_order: bool) -> list[tuple[str, EventContext]]:
        events: list[EventContext] = [
            RunStartContext(run_id=run, time_ns=now, session_id=session),
            TurnStartContext(run_id=run, time_ns=now, turn=0),
        ]
        if ok_order:
            events.append(provider())
        events += [
            StreamStartContext(run_id=run, time_ns=now, turn=0, model="m"),
            StreamSuccessContext(run_id=run, time_ns=now, turn=0, model="m"),
        ]
        if not ok_order:
            events.append(provider())
        events += [
            TurnEndContext(run_id=run, time_ns=now, turn=0, success=True),
            RunEndContext(run_id=run, time_ns=now, success=True, status=RunStatus.COMPLETED),
        ]
        return [(e.hook, e) for e in events]

    assert check_contract(stream(True)) == []
    problems = check_contract(stream(False))
    assert any("context provider after" in p for p in problems)
    queue = BackpressureContext(
        run_id=session, time_ns=now, queue="inbox", outcome="rejected", capacity=1, policy="reject"
    )
    assert check_contract([("on_backpressure", queue), *stream(True)]) == []
    wrong = BackpressureContext(
        run_id=run, time_ns=now, queue="inbox", outcome="dropped", capacity=1, policy="drop_oldest"
    )
    problems = check_contract([*stream(True), ("on_backpressure", wrong)])
    assert any("carries the id of run" in p for p in problems)


async def test_a_provider_raising_cancelled_error_itself_is_its_own_failure() -> None:
    """Nothing cancelled the run: the provider's CancelledError is that provider's failure."""

    async def rude(query: str) -> str:
        raise asyncio.CancelledError

    rec = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient([Reply(text="ok")]),
        model="m",
        observers=[rec],
        context_providers=[rude, memory],
    )
    result = await asyncio.wait_for(loop.run("birds"), 30)
    assert result.ok
    assert result.answer == "ok"
    outcomes = {c.provider: (c.outcome, c.error) for c in rec.of("on_context_provider")}
    assert outcomes["memory"][0] == "ok"
    outcome, error = outcomes["rude"]
    assert outcome == "error"
    assert error.error_type == "CancelledError"
    assert "raised CancelledError itself" in str(error)
    assert rec.of("on_run_end")[0].status == "completed"
    assert check_contract(rec.events) == []
