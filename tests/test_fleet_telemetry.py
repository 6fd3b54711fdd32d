"""Telemetry of the fleet layer and of USD limits that cannot apply.

``on_shared_budget``: every ledger step of a run's shared budget (reservations made, refused,
store errors, commits with their drift from the worst case, expired reservations) on both metric
paths; ``on_budget_unpriced``: a USD limit that meets a model with no price, once per run.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from loopobs import (
    AgentLoop,
    Amounts,
    Budget,
    BudgetGuard,
    Conversation,
    InProcessLedger,
    ModelRates,
    RunStatus,
    SharedBudget,
    StoreUnavailable,
    Usage,
)
from loopobs.contract.observer import ObserverSet
from loopobs.exporters import PrometheusObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.jsonl import JsonlRecorder, replay
from loopobs.exporters.metrics import MetricsObserver
from loopobs.llm import Reply, ScriptedClient
from loopobs.loop import shared_spend
from loopobs.testing import RecordingObserver, metric_points
from tests.conftest import sample_context

PRICES = {"m": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=1_000_000.0)}
"""$1 a token: reservations and costs in round dollars."""
AGENT = "fleet"


def _answer(tokens: tuple[int, int] = (10, 5)) -> Reply:
    return Reply(text="done", usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]))


def _paths() -> tuple[PrometheusObserver, MetricsObserver, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return (
        PrometheusObserver(CollectorRegistry()),
        MetricsObserver(MeterProvider(metric_readers=[reader])),
        reader,
    )


def _value(point: Any) -> float:
    """A counter's or gauge's value, a histogram's sum."""
    value = getattr(point, "value", None)
    return float(value if value is not None else getattr(point, "sum", 0.0))


def _otel_sum(reader: InMemoryMetricReader, name: str, **labels: str) -> float:
    total = 0.0
    for point in metric_points(reader).get(name, []):
        attrs = dict(point.attributes or {})
        if all(attrs.get(k) == v for k, v in labels.items()):
            total += _value(point)
    return total


def _otel_count(reader: InMemoryMetricReader, name: str, **labels: str) -> int:
    return sum(
        point.count
        for point in metric_points(reader).get(name, [])
        if all(dict(point.attributes or {}).get(k) == v for k, v in labels.items())
    )


def _loop(shared: SharedBudget, replies: list[Any], *observers: Any, **kw: Any) -> AgentLoop:
    return AgentLoop(
        ScriptedClient(replies),
        model="m",
        detectors=[],
        shared_budget=shared,
        prices=PRICES,
        observers=observers,
        agent_name=AGENT,
        **kw,
    )


class DownLedger(InProcessLedger):
    name = "redis://127.0.0.1:1/0"

    async def reserve(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable(store=self.name, reason="reserve took longer than 0.5s")


class CommitDownLedger(InProcessLedger):
    async def commit(self, *args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable(store=self.name, reason="commit took longer than 0.5s")


_OPS = c.SHARED_BUDGET_OPERATIONS.prometheus_name
_OP, _OUT = (
    c.prometheus_label(c.LOOPOBS_SHARED_BUDGET_OPERATION),
    c.prometheus_label(c.LOOPOBS_SHARED_BUDGET_OUTCOME),
)


async def test_a_reservation_and_its_commit_are_events_and_metrics_on_both_paths() -> None:
    prom, otel, reader = _paths()
    recorder = RecordingObserver()
    shared = SharedBudget(InProcessLedger(), session=Budget(usd=1000.0))
    loop = _loop(
        shared, [_answer((10, 5))], recorder, prom, otel, request_options={"max_tokens": 100}
    )
    result = await loop.run("hello")
    assert result.ok
    steps = recorder.of("on_shared_budget")
    assert [(s.operation, s.outcome) for s in steps] == [("reserve", "ok"), ("commit", "ok")]
    reserve, commit = steps
    assert reserve.store == commit.store == "memory"
    assert reserve.reserved_usd == commit.reserved_usd == pytest.approx(reserve.reserved_usd)
    assert reserve.reserved_usd > 100  # the estimate plus max_tokens, at $1 a token
    assert commit.committed_usd == pytest.approx(15.0)
    assert all(s.duration_ms >= 0 for s in steps)
    # The reserve comes before the attempt, the commit before its end event.
    hooks = [
        h
        for h in recorder.hooks()
        if h in ("on_shared_budget", "on_stream_start", "on_stream_success")
    ]
    assert hooks == ["on_shared_budget", "on_stream_start", "on_shared_budget", "on_stream_success"]
    get = prom.registry.get_sample_value
    labels = {"gen_ai_agent_name": AGENT}
    assert get(_OPS, {**labels, _OP: "reserve", _OUT: "ok"}) == 1
    assert get(_OPS, {**labels, _OP: "commit", _OUT: "ok"}) == 1
    drift = c.SHARED_BUDGET_DRIFT.prometheus_name
    assert get(f"{drift}_sum", labels) == pytest.approx(reserve.reserved_usd - 15.0)
    duration = c.SHARED_BUDGET_STORE_DURATION.prometheus_name
    assert get(f"{duration}_count", {_OP: "reserve", _OUT: "ok"}) == 1
    op, out = c.LOOPOBS_SHARED_BUDGET_OPERATION, c.LOOPOBS_SHARED_BUDGET_OUTCOME
    assert _otel_sum(reader, c.SHARED_BUDGET_OPERATIONS.name, **{op: "reserve", out: "ok"}) == 1
    assert _otel_sum(reader, c.SHARED_BUDGET_OPERATIONS.name, **{op: "commit", out: "ok"}) == 1
    assert _otel_sum(reader, c.SHARED_BUDGET_DRIFT.name) == pytest.approx(
        reserve.reserved_usd - 15.0
    )
    assert _otel_count(reader, c.SHARED_BUDGET_STORE_DURATION.name, **{op: "commit"}) == 1


async def test_refusals_and_store_errors_are_counted_by_outcome() -> None:
    prom, otel, reader = _paths()
    recorder = RecordingObserver()
    full = SharedBudget(InProcessLedger(), scopes={"tenant": Budget(model_calls=1)})
    acme = {"tenant": "acme"}
    loop = _loop(full, [_answer(), _answer()], recorder, prom, otel)
    assert (await loop.run("q", session=Conversation(attribution=acme))).ok
    refused = await loop.run("q", session=Conversation(attribution=acme))
    assert refused.status is RunStatus.BUDGET_EXCEEDED
    closed = await _loop(SharedBudget(DownLedger()), [_answer()], recorder, prom, otel).run("q")
    assert closed.status is RunStatus.FAILED
    opened = SharedBudget(DownLedger(), on_unavailable="fail_open")
    assert (await _loop(opened, [_answer()], recorder, prom, otel).run("q")).ok
    no_commit = SharedBudget(CommitDownLedger())
    assert (await _loop(no_commit, [_answer()], recorder, prom, otel).run("q")).ok
    outcomes = [(s.operation, s.outcome, s.scope_key) for s in recorder.of("on_shared_budget")]
    assert outcomes == [
        ("reserve", "ok", ""),
        ("commit", "ok", ""),
        ("reserve", "refused", "tenant:acme"),
        ("reserve", "error", ""),
        ("reserve", "unguarded", ""),
        ("reserve", "ok", ""),
        ("commit", "error", ""),
    ]
    get = prom.registry.get_sample_value
    labels = {"gen_ai_agent_name": AGENT}
    for operation, outcome, count in [
        ("reserve", "ok", 2),
        ("reserve", "refused", 1),
        ("reserve", "error", 1),
        ("reserve", "unguarded", 1),
        ("commit", "error", 1),
        ("commit", "ok", 1),
    ]:
        assert get(_OPS, {**labels, _OP: operation, _OUT: outcome}) == count, (operation, outcome)
        keys = {
            c.LOOPOBS_SHARED_BUDGET_OPERATION: operation,
            c.LOOPOBS_SHARED_BUDGET_OUTCOME: outcome,
        }
        assert _otel_sum(reader, c.SHARED_BUDGET_OPERATIONS.name, **keys) == count
    # A failed commit settles nothing: no drift is recorded for it.
    drift = c.SHARED_BUDGET_DRIFT.prometheus_name
    assert get(f"{drift}_count", labels) == 1
    assert no_commit.store_errors == 1


async def test_expired_reservations_are_counted_once() -> None:
    now = [0.0]
    ledger = InProcessLedger(clock=lambda: now[0])
    shared = SharedBudget(ledger, session=Budget(usd=1e9), reservation_ttl_s=10)
    # A worker that died mid-call: its reservation is never settled.
    await shared.reserve(shared.scopes_for("dead"), shared_amounts())
    now[0] = 11.0
    prom, otel, reader = _paths()
    recorder = RecordingObserver()
    assert (await _loop(shared, [_answer(), _answer()], recorder, prom, otel).run("q")).ok
    assert (await _loop(shared, [_answer()], recorder, prom, otel).run("q")).ok
    assert sum(s.expired for s in recorder.of("on_shared_budget")) == 1
    expired = c.SHARED_BUDGET_EXPIRED.prometheus_name
    assert prom.registry.get_sample_value(expired, {"gen_ai_agent_name": AGENT}) == 1
    assert _otel_sum(reader, c.SHARED_BUDGET_EXPIRED.name) == 1


def shared_amounts() -> Amounts:
    return Amounts(usd=1.0, model_calls=1)


async def test_without_a_listener_no_shared_budget_event_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(**fields: Any) -> None:
        raise AssertionError("a shared budget event was built with nobody listening")

    monkeypatch.setattr(shared_spend, "SharedBudgetContext", refuse)
    shared = SharedBudget(InProcessLedger(), session=Budget(usd=1e9))
    assert (await _loop(shared, [_answer()]).run("q")).ok


# -- a USD limit on a model with no price ---------------------------------------------------------


def _unpriced_loop(*observers: Any, budget: Budget) -> AgentLoop:
    replies = [Reply(text="done", usage=Usage(input_tokens=1_200_000, output_tokens=10))]
    client = ScriptedClient(replies)
    client.provider = "openai"
    return AgentLoop(
        client,
        model="my-unpriced-model",
        detectors=[],
        budget=budget,
        observers=observers,
        agent_name=AGENT,
    )


async def test_a_usd_limit_on_an_unpriced_model_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Budget(usd=0.01) and 1.2M input tokens of a model with no price: the limit cannot
    apply (documented in docs/budgets.md): the run is not stopped by it, and says so once —
    a warning, one ``on_budget_unpriced`` event, ``loopobs.budget.unpriced`` = 1 on both
    metric paths."""
    prom, otel, reader = _paths()
    recorder = RecordingObserver()
    with caplog.at_level(logging.WARNING, logger="loopobs.budget"):
        result = await _unpriced_loop(recorder, prom, otel, budget=Budget(usd=0.01)).run("q")
    assert result.ok
    assert recorder.of("on_budget_exceeded") == []
    (note,) = recorder.of("on_budget_unpriced")
    assert (note.model, note.provider, note.scope, note.budget) == (
        "my-unpriced-model",
        "openai",
        "run",
        0.01,
    )
    assert len([r for r in caplog.records if "no known price" in r.getMessage()]) == 1
    labels = {
        "gen_ai_agent_name": AGENT,
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": "my-unpriced-model",
        "loopobs_budget_scope": "run",
    }
    assert prom.registry.get_sample_value(c.BUDGET_UNPRICED.prometheus_name, labels) == 1
    assert _otel_sum(reader, c.BUDGET_UNPRICED.name, **{c.LOOPOBS_BUDGET_SCOPE: "run"}) == 1


async def test_every_call_after_the_first_unpriced_one_is_silent() -> None:
    replies = [Reply(text="a", usage=Usage(input_tokens=10, output_tokens=1))] * 3
    recorder = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient(replies), model="nope", detectors=[], budget=Budget(usd=1.0, model_calls=9)
    )
    loop.observers.add(recorder)
    session = Conversation()
    for _ in range(3):
        assert (await loop.run("q", session=session)).ok
    # Once per run: three runs, three events, never one per call.
    assert len(recorder.of("on_budget_unpriced")) == 3


async def test_a_budget_without_usd_never_notes_unpriced_calls() -> None:
    recorder = RecordingObserver()
    result = await _unpriced_loop(recorder, budget=Budget(total_tokens=10_000_000)).run("q")
    assert result.ok
    assert recorder.of("on_budget_unpriced") == []


async def test_a_shared_usd_limit_on_an_unpriced_model_is_an_event_too() -> None:
    recorder = RecordingObserver()
    shared = SharedBudget(InProcessLedger(), session=Budget(usd=0.01))
    loop = AgentLoop(
        ScriptedClient([_answer((1_200_000, 10))]),
        model="unpriced",
        detectors=[],
        shared_budget=shared,
        observers=[recorder],
    )
    assert (await loop.run("q")).ok
    (note,) = recorder.of("on_budget_unpriced")
    assert (note.scope, note.budget) == ("shared", 0.01)


def test_the_budget_guard_notes_unpriced_calls_for_loops_it_does_not_run() -> None:
    recorder = RecordingObserver()
    guard = BudgetGuard(Budget(usd=0.01))
    observers = ObserverSet([guard, recorder], strict=True)
    start = sample_context("on_run_start", agent=AGENT, model="unpriced")
    observers.on_run_start(start)
    for _ in range(2):
        observers.on_stream_success(
            sample_context(
                "on_stream_success",
                model="unpriced",
                provider="x",
                cost_usd=None,
                input_tokens=1_200_000,
                output_tokens=5,
                cache_read_input_tokens=0,
                cache_write_input_tokens=0,
                reasoning_output_tokens=0,
                response_model=None,
            )
        )
    (note,) = recorder.of("on_budget_unpriced")
    assert (note.model, note.scope) == ("unpriced", "run")
    assert guard.exceeded(start.run_id) is None


async def test_fleet_events_round_trip_through_the_jsonl_log(tmp_path: Any) -> None:
    path = tmp_path / "events.jsonl"
    log = JsonlRecorder(path)
    shared = SharedBudget(InProcessLedger(), session=Budget(usd=0.01))
    loop = AgentLoop(
        ScriptedClient([_answer()]),
        model="unpriced",
        detectors=[],
        shared_budget=shared,
        observers=[log],
    )
    assert (await loop.run("q")).ok
    log.shutdown()
    recorder = RecordingObserver()
    replay(path, recorder)
    assert [s.operation for s in recorder.of("on_shared_budget")] == ["reserve", "commit"]
    assert len(recorder.of("on_budget_unpriced")) == 1


def _tracing() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopobs.exporters.tracing import TracingObserver

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return TracingObserver(provider), spans


def _span_events(spans: Any, name: str) -> list[dict[str, Any]]:
    return [
        dict(event.attributes or {})
        for span in spans.get_finished_spans()
        for event in span.events
        if event.name == name
    ]


async def test_refusals_and_store_errors_are_span_events_and_steps_that_went_through_are_not() -> (
    None
):
    tracing, spans = _tracing()
    full = SharedBudget(InProcessLedger(), scopes={"tenant": Budget(model_calls=1)})
    acme = {"tenant": "acme"}
    loop = _loop(full, [_answer(), _answer()], tracing)
    assert (await loop.run("q", session=Conversation(attribution=acme))).ok
    assert _span_events(spans, c.EVENT_SHARED_BUDGET) == []  # a reserve and a commit, both ok
    refused = await loop.run("q", session=Conversation(attribution=acme))
    assert refused.status is RunStatus.BUDGET_EXCEEDED
    closed = await _loop(SharedBudget(DownLedger()), [_answer()], tracing).run("q")
    assert closed.status is RunStatus.FAILED
    events = _span_events(spans, c.EVENT_SHARED_BUDGET)
    assert [
        (
            e[c.LOOPOBS_SHARED_BUDGET_OPERATION],
            e[c.LOOPOBS_SHARED_BUDGET_OUTCOME],
            e.get(c.LOOPOBS_SHARED_BUDGET_SCOPE_KEY),
            e[c.LOOPOBS_SHARED_BUDGET_STORE],
        )
        for e in events
    ] == [
        ("reserve", "refused", "tenant:acme", "memory"),
        ("reserve", "error", None, "redis://127.0.0.1:1/0"),
    ]
    assert all(e[c.LOOPOBS_SHARED_BUDGET_DURATION_MS] >= 0 for e in events)
    assert tracing.open_runs == 0


async def test_a_usd_limit_on_an_unpriced_model_is_a_span_event() -> None:
    tracing, spans = _tracing()
    result = await _unpriced_loop(tracing, budget=Budget(usd=0.01)).run("q")
    assert result.ok
    (event,) = _span_events(spans, c.EVENT_BUDGET_UNPRICED)
    assert event[c.GEN_AI_REQUEST_MODEL] == "my-unpriced-model"
    assert event[c.LOOPOBS_BUDGET_SCOPE] == "run"
    assert event[c.LOOPOBS_BUDGET_ALLOWED] == 0.01
