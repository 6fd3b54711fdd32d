"""AgentLoop fallback: retryable failures move the turn to the next model; others fail the run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from loopobs import FallbackExhausted, LoopError, ModelError, RateLimited, RunStatus, StreamError
from loopobs.contract.model import Finish, ModelRequest, StreamEvent, TextDelta
from loopobs.llm import Fail, Reply
from loopobs.testing import assert_contract
from tests._loop_support import make_loop, names, u

OK = Reply(text="fine", usage=u(5, 1))


@pytest.mark.parametrize(
    "error",
    [
        RateLimited(provider="scripted"),
        ModelError("overloaded", retryable=True, status_code=503),
        StreamError("connection reset"),
    ],
)
async def test_a_retryable_failure_falls_back_to_the_next_model(error: LoopError) -> None:
    """stream_failure → fallback → model_switched → stream_start on the next model, same turn."""
    loop, rec, client = make_loop([Fail(error), OK], fallback_models=["m2"])
    result = await loop.run("q")
    assert result.ok
    assert result.usage == u(5, 1)
    assert [r.model for r in client.requests] == ["m1", "m2"]
    assert names(rec.events) == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_stream_failure",
        "on_fallback",
        "on_model_switched",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    failure = rec.of("on_stream_failure")[0]
    assert (failure.model, failure.attempt, failure.error) == ("m1", 0, error)
    fb = rec.of("on_fallback")[0]
    assert (fb.from_model, fb.to_model, fb.turn) == ("m1", "m2", 0)
    sw = rec.of("on_model_switched")[0]
    assert (sw.from_model, sw.to_model) == ("m1", "m2")
    assert [(s.model, s.attempt) for s in rec.of("on_stream_start")] == [("m1", 0), ("m2", 1)]
    assert rec.of("on_stream_success")[0].model == "m2"
    assert_contract(rec.events)


@pytest.mark.parametrize("status", [400, 401])
async def test_a_non_retryable_failure_fails_the_run(status: int) -> None:
    """A 400/401 fails the run at once, without fallback, ending the turn unsuccessfully."""
    error = ModelError("bad request", retryable=False, status_code=status)
    loop, rec, client = make_loop([Fail(error), OK], fallback_models=["m2"])
    result = await loop.run("q")
    assert result.status is RunStatus.FAILED
    assert result.error == error
    assert len(client.requests) == 1
    assert not rec.of("on_fallback")
    turn_end = rec.of("on_turn_end")[0]
    assert (turn_end.success, turn_end.error) == (False, error)
    end = rec.of("on_run_end")[0]
    assert (end.status, end.success, end.error) == ("failed", False, error)
    assert_contract(rec.events)


async def test_every_model_failing_is_fallback_exhausted() -> None:
    """When every model of the chain fails retryably the run fails with FallbackExhausted."""
    loop, rec, _ = make_loop([Fail(RateLimited())] * 3, fallback_models=["m2", "m3"])
    result = await loop.run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, FallbackExhausted)
    assert result.error.models == ("m1", "m2", "m3")
    assert [type(e) for e in result.error.failures] == [RateLimited] * 3
    assert len(rec.of("on_stream_failure")) == 3
    assert [(f.from_model, f.to_model) for f in rec.of("on_fallback")] == [
        ("m1", "m2"),
        ("m2", "m3"),
    ]
    assert_contract(rec.events)


async def test_the_next_turn_goes_back_to_the_primary_model() -> None:
    """After a fallback, the next turn calls the loop's model again and reports the switch."""
    from loopobs.llm import ToolCall

    tool_turn = Reply(tool_calls=(ToolCall("add", {"a": 1, "b": 1}),), usage=u(1, 1))
    loop, rec, client = make_loop([Fail(RateLimited()), tool_turn, OK], fallback_models=["m2"])
    result = await loop.run("q")
    assert result.ok
    assert [r.model for r in client.requests] == ["m1", "m2", "m1"]
    assert [(s.from_model, s.to_model) for s in rec.of("on_model_switched")] == [
        ("m1", "m2"),
        ("m2", "m1"),
    ]
    assert_contract(rec.events)


class BreakingClient:
    """Streams some text, then fails (or just stops) the first call; answers the second."""

    provider = "breaking"

    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure
        self.calls = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        return self._play(self.calls)

    async def _play(self, call: int) -> AsyncIterator[StreamEvent]:
        yield TextDelta("partial ")
        if call == 1:
            if self.failure is not None:
                raise self.failure
            return  # ends without Finish
        yield TextDelta("answer")
        yield Finish(reason="stop")


@pytest.mark.parametrize("failure", [StreamError("reset"), None])
async def test_a_stream_that_breaks_midway_falls_back(failure: LoopError | None) -> None:
    """Deltas of the broken attempt stay inside it; a stream without Finish is a StreamError."""
    loop, rec, _ = make_loop(BreakingClient(failure), fallback_models=["m2"])
    result = await loop.run("q")
    assert result.ok
    assert result.answer == "partial answer"
    failure_ctx = rec.of("on_stream_failure")[0]
    assert isinstance(failure_ctx.error, StreamError)
    assert failure_ctx.provider == "breaking"
    assert_contract(rec.events)


async def test_a_client_raising_a_foreign_exception_fails_the_run() -> None:
    """An exception that is not a LoopError becomes a non-retryable ModelError naming it."""
    loop, rec, _ = make_loop(BreakingClient(OSError("socket gone")), fallback_models=["m2"])
    result = await loop.run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, ModelError)
    assert "OSError: socket gone" in str(result.error)
    assert not rec.of("on_fallback")
    assert_contract(rec.events)


async def test_with_a_single_model_the_runs_error_is_the_models_error() -> None:
    """No fallback models: a 429 ends the run with that RateLimited, status and message kept."""
    err = RateLimited("slow down, tier 1", retry_after=7.0, status_code=429, provider="openai")
    loop, rec, _ = make_loop([Fail(err)])
    result = await loop.run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, RateLimited)
    assert result.error.status_code == 429
    assert result.error.to_dict()["message"] == "slow down, tier 1"
    assert rec.of("on_run_end")[0].error == err
    assert_contract(rec.events)
