"""Budgets that leak and costs that lie (issue 29, items 16 and 18–23): each test names its item."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loopobs import (
    AgentLoop,
    Budget,
    BudgetGuard,
    ModelRates,
    ObserverSet,
    RunEndContext,
    RunStartContext,
    RunStatus,
    StreamError,
    StreamStartContext,
    StreamSuccessContext,
    Usage,
)
from loopobs.contract.model import Finish, ModelRequest, StreamEvent, TextDelta, UsageReport
from loopobs.cost.pricing import price_lookup, safe_cost
from loopobs.exporters import JsonlRecorder
from loopobs.llm import Fail, Reply, ScriptedClient
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_support import make_loop, search, u

RATES = {
    "m1": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0),
    "m2": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0),
}
"""$1 per input token: a call's cost is its input token count, in dollars."""


# -- 16: fallback calls are checked before they are made --------------------------------------


async def test_fallback_calls_are_refused_past_the_model_call_limit() -> None:
    """Budget(model_calls=1): the first attempt fails over, the fallback would be call 2."""
    loop, rec, client = make_loop(
        [Fail(StreamError("reset")), Fail(StreamError("reset")), Reply(text="late")],
        fallback_models=["m2", "m3"],
        budget=Budget(model_calls=1),
    )
    result = await loop.run("q")
    assert len(client.requests) == 1
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert result.spend.model_calls == 1
    (stop,) = rec.of("on_budget_exceeded")
    assert (stop.limit, stop.value, stop.action) == ("model_calls", 2.0, "stop")
    assert rec.of("on_fallback") == []  # the fallback that was refused is not reported
    assert rec.of("on_turn_end")[0].error == result.error
    assert_contract(rec.events)


async def test_a_fallback_call_that_would_cross_the_usd_budget_is_not_made() -> None:
    """A $1 budget: the cheap first model fails over to a model at $1 a token."""
    prices = {
        "m1": ModelRates(input_per_mtok=0.01, output_per_mtok=0.0),
        "m2": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0),
    }
    loop, rec, client = make_loop(
        [Fail(StreamError("reset")), Reply(text="expensive")],
        fallback_models=["m2"],
        budget=Budget(usd=1.0),
        prices=prices,
    )
    result = await loop.run("q")
    assert [r.model for r in client.requests] == ["m1"]
    assert result.status is RunStatus.BUDGET_EXCEEDED
    (stop,) = rec.of("on_budget_exceeded")
    assert (stop.limit, stop.action) == ("usd", "stop")
    assert stop.value > 1.0
    assert_contract(rec.events)


# -- 18: a session's wall time with overlapping runs ------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _start(observers: ObserverSet, run_id: uuid.UUID, session: uuid.UUID) -> None:
    observers.on_run_start(RunStartContext(run_id=run_id, time_ns=1, session_id=session))


def _end(observers: ObserverSet, run_id: uuid.UUID) -> None:
    observers.on_run_end(RunEndContext(run_id=run_id, time_ns=2, success=True))


def test_session_wall_time_counts_while_any_of_its_runs_is_running() -> None:
    """Two runs of one session overlap: a 60 s run and a 0.1 s one inside it is 60 s."""
    clock = FakeClock()
    guard = BudgetGuard(session_budget=Budget(wall_time_s=30), clock=clock)
    observers = ObserverSet([guard])
    session, long_run, short_run = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    _start(observers, long_run, session)
    clock.now += 10
    _start(observers, short_run, session)
    clock.now += 0.1
    _end(observers, short_run)
    clock.now += 49.9
    _end(observers, long_run)
    spend = guard.session_spend(session)
    assert spend is not None
    assert spend.wall_time_s == pytest.approx(60.0)
    later = uuid.uuid4()
    _start(observers, later, session)
    stop = guard.before_call(later, "m", "p", Usage())
    assert stop is not None
    assert (stop.limit, stop.scope) == ("wall_time_s", "session")


# -- 19: a stream that reported usage and was then cut off costs what it reported -------------


class CutOff:
    """Reports its usage, then the connection drops before the final event."""

    provider = "scripted"

    def __init__(self, usage: Usage, then: Reply | None = None) -> None:
        self.usage = usage
        self.then = then
        self.calls = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        return self._play(self.calls)

    async def _play(self, call: int) -> AsyncIterator[StreamEvent]:
        if call > 1 and self.then is not None:
            yield TextDelta(self.then.text)
            if self.then.usage is not None:
                yield UsageReport(self.then.usage)
            yield Finish(reason="stop")
            return
        yield TextDelta("partial")
        yield UsageReport(self.usage)
        raise StreamError("connection reset")


async def test_a_cut_off_stream_costs_what_it_reported() -> None:
    """The failed attempt's reported usage is priced into the run's spend and its budget."""
    client = CutOff(u(3, 0), then=Reply(text="done", usage=u(2, 0)))
    loop, rec, _ = make_loop(client, fallback_models=["m2"], prices=RATES)
    result = await loop.run("q")
    assert result.ok
    assert result.cost_usd == pytest.approx(5.0)
    assert result.spend.input_tokens == 5
    assert rec.of("on_run_end")[0].cost_usd == pytest.approx(5.0)
    assert rec.of("on_turn_end")[0].cost_usd == pytest.approx(5.0)


async def test_cut_off_streams_count_toward_the_usd_budget() -> None:
    """A $4 budget and $3 cut-off calls: the third call is refused; none was free."""
    client = CutOff(u(3_000, 0))
    per_token = ModelRates(input_per_mtok=1_000.0, output_per_mtok=0.0)  # $0.001 a token
    loop, rec, _ = make_loop(
        client,
        fallback_models=["m2", "m1", "m2"],
        prices={"m1": per_token, "m2": per_token},
        budget=Budget(usd=4.0),
    )
    result = await loop.run("q")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert client.calls == 2  # the second was made on a $3 spend plus a small estimate
    assert result.spend.usd == pytest.approx(6.0)
    assert_contract(rec.events)


# -- 20: implausible usage is an unknown cost, never zero -------------------------------------


async def test_implausible_usage_is_priced_as_unknown() -> None:
    """A negative input count is dropped as unknown: the call's cost is None, not 0.0."""
    loop, rec, _ = make_loop(
        [Reply(text="hi", usage=Usage(input_tokens=-5, output_tokens=2))], prices=RATES
    )
    result = await loop.run("q")
    assert result.ok
    assert rec.of("on_stream_success")[0].cost_usd is None
    assert result.cost_usd is None
    assert result.spend.unpriced_calls == 1


def test_safe_cost_refuses_implausible_usage() -> None:
    """Priced by hand, an implausible usage has no price either."""
    prices = price_lookup(RATES)
    assert safe_cost(prices, "m1", "", Usage(input_tokens=2**70)) is None
    assert safe_cost(prices, "m1", "", Usage(input_tokens=-1)) is None
    assert safe_cost(prices, "m1", "", Usage(input_tokens=2)) == pytest.approx(2.0)


# -- 21: non-finite numbers are refused where they enter --------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0])
def test_prices_refuse_non_finite_and_negative_rates(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        ModelRates(input_per_mtok=bad, output_per_mtok=1.0)
    with pytest.raises(ValueError, match="finite"):
        price_lookup({"m": bad})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -2.0])
def test_a_price_function_returning_a_non_finite_cost_is_unknown(bad: float) -> None:
    prices = price_lookup(lambda model, provider, usage: bad)
    assert safe_cost(prices, "house-model", "", Usage(input_tokens=1)) is None


async def test_a_nan_price_never_reaches_the_budget_the_metrics_or_the_log(tmp_path: Path) -> None:
    """A price function answering NaN: the cost is unknown, the USD budget still applies to
    what is known, and the JSONL log stays valid JSON."""
    log = tmp_path / "events.jsonl"
    jsonl = JsonlRecorder(log)
    rec = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient([Reply(text="hi", usage=u(10, 1))]),
        model="house",
        observers=[rec, jsonl],
        detectors=[],
        budget=Budget(usd=1.0),
        prices=lambda model, provider, usage: math.nan,
    )
    result = await loop.run("q")
    jsonl.shutdown()
    assert result.ok
    assert result.cost_usd is None
    assert not math.isnan(result.spend.usd)
    assert rec.of("on_stream_success")[0].cost_usd is None
    for line in log.read_text("utf-8").splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the log"))


def test_the_guard_refuses_non_finite_costs_and_counts_on_events() -> None:
    """A hand-emitted NaN cost or token count is unknown to the guard, never NaN spend."""
    guard = BudgetGuard(Budget(usd=1.0, total_tokens=100))
    observers = ObserverSet([guard])
    run_id = uuid.uuid4()
    _start(observers, run_id, uuid.uuid4())
    observers.on_stream_start(StreamStartContext(run_id=run_id, time_ns=1, turn=0, model="m"))
    observers.on_stream_success(
        StreamSuccessContext(
            run_id=run_id,
            time_ns=2,
            turn=0,
            model="m",
            input_tokens=math.nan,  # type: ignore[arg-type]
            output_tokens=3,
            cost_usd=math.nan,
        )
    )
    spend = guard.spend(run_id)
    assert spend is not None
    assert (spend.usd, spend.input_tokens, spend.output_tokens) == (0.0, 0, 3)
    assert spend.unpriced_calls == 1
    assert guard.exceeded(run_id) is None


# -- 22: the estimate before a call is the request really sent --------------------------------


async def test_context_provider_text_counts_in_the_estimate_before_the_call() -> None:
    """A provider adding ~26k tokens: Budget(input_tokens=5000) refuses the call."""

    async def huge(query: str) -> str:
        return "word " * 26_000

    rec = RecordingObserver()
    client = ScriptedClient([Reply(text="never", usage=u(26_010, 1))])
    loop = AgentLoop(
        client,
        model="m1",
        tools=[search],
        observers=[rec],
        detectors=[],
        context_providers=[huge],
        budget=Budget(input_tokens=5_000),
    )
    result = await loop.run("q")
    assert client.requests == []
    assert result.status is RunStatus.BUDGET_EXCEEDED
    (stop,) = rec.of("on_budget_exceeded")
    assert stop.limit == "input_tokens"
    assert stop.value > 5_000
    assert_contract(rec.events)


# -- 23: a Budget refuses limits that would disable it ----------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        "usd",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "tool_calls",
        "model_calls",
        "wall_time_s",
    ],
)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1])
def test_a_budget_refuses_non_finite_and_negative_limits(field: str, bad: float) -> None:
    with pytest.raises(ValueError, match=field):
        Budget(**{field: bad})  # type: ignore[arg-type]


def test_a_budget_refuses_a_non_number_limit() -> None:
    with pytest.raises(TypeError, match="model_calls"):
        Budget(model_calls="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="usd"):
        Budget(usd=True)


def test_budget_guard_keeps_its_old_import_path() -> None:
    """BudgetGuard runs on RunSpending now (loopobs.cost.spending); the old path still works."""
    from loopobs.cost import budget, spending

    assert budget.BudgetGuard is spending.BudgetGuard is BudgetGuard
    assert budget.DEFAULT_MAX_RUNS == spending.DEFAULT_MAX_RUNS
    with pytest.raises(AttributeError):
        budget.NoSuchName  # noqa: B018
