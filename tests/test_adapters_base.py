"""The adapter base: framework callbacks in any order become a contract-true event stream."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest

from loopobs import (
    Cancelled,
    ConvergenceDetector,
    LoopDetected,
    LoopError,
    LoopObserver,
    RepetitionDetector,
    ToolPostContext,
    ToolPreContext,
    Usage,
)
from loopobs.adapters import (
    FrameworkToolCall,
    RunStopped,
    RunTracker,
    missing_extra,
    shielded,
)
from loopobs.adapters import _run as adapter_run
from loopobs.cost.budget import Budget, BudgetGuard
from loopobs.cost.pricing import ModelRates
from loopobs.testing import RecordingObserver, assert_contract


def _tracker(*observers: LoopObserver, **kwargs: object) -> tuple[RunTracker, RecordingObserver]:
    recorder = RecordingObserver()
    tracker = RunTracker([recorder, *observers], **kwargs)  # type: ignore[arg-type]
    return tracker, recorder


def test_a_react_run_is_reported_in_contract_order() -> None:
    """Model call with two tool calls, the tools, then the answer: turns, usage, received calls."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run(agent="a", model="m", query="q")
    assert run.model_start("llm1", model="m", provider="p")
    run.text_delta("llm1", "thinking about it")
    run.model_end(
        "llm1",
        usage=Usage(input_tokens=10, output_tokens=3),
        text="t",
        tool_calls=[
            FrameworkToolCall("c1", "add", {"a": 1}),
            FrameworkToolCall("c2", "add", {"a": 2}),
        ],
    )
    run.tool_start("t1", tool="add", call_id="c1", arguments={"a": 1})
    run.tool_start("t2", tool="add", call_id="c2", arguments={"a": 2})
    run.tool_end("t2", result="2")
    run.tool_end("t1", result="1")
    assert run.model_start("llm2", model="m")
    run.model_end("llm2", usage=Usage(input_tokens=20, output_tokens=5), text="done")
    run.end()
    assert_contract(rec.events)
    assert rec.hooks() == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_text_delta",
        "on_stream_success",
        "on_response",
        "on_tool_call_received",
        "on_tool_call_received",
        "on_tool_pre",
        "on_tool_pre",
        "on_tool_post",
        "on_tool_post",
        "on_turn_end",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    assert [c.turn for c in rec.of("on_turn_start")] == [0, 1]
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success, end.total_turns) == ("completed", True, 2)
    assert (end.input_tokens, end.output_tokens) == (30, 8)
    assert [c.input_tokens for c in rec.of("on_turn_end")] == [10, 20]
    assert rec.of("on_stream_success")[0].time_to_first_token_ms is not None
    assert tracker.active_runs == 0


def test_turns_keep_counting_across_runs_of_a_session() -> None:
    """Two runs of one session number their turns 0, then 1."""
    tracker, rec = _tracker(detectors=[])
    session = uuid.uuid4()
    for key in ("a", "b"):
        run = tracker.start_run(session_id=session)
        run.model_start(key, model="m")
        run.model_end(key, text="x")
        run.end()
    assert [c.turn for c in rec.of("on_turn_start")] == [0, 1]
    assert_contract(rec.events)


def test_a_retry_is_the_next_attempt_of_the_same_turn() -> None:
    """A failed model call followed by another is one turn with attempts 0 and 1."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.model_start("x", model="m")
    run.model_error("x", TimeoutError("slow"))
    run.model_start("y", model="m")
    run.model_end("y", text="ok")
    run.end()
    assert_contract(rec.events)
    assert [c.attempt for c in rec.of("on_stream_start")] == [0, 1]
    (failure,) = rec.of("on_stream_failure")
    assert failure.error.message == "TimeoutError: slow"
    (turn_end,) = rec.of("on_turn_end")
    assert turn_end.success


def test_duplicate_call_ids_pair_by_attempt() -> None:
    """Two concurrent attempts with the same call id get attempts 0 and 1 and pair correctly."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.tool_start("k1", tool="t", call_id="same")
    run.tool_start("k2", tool="t", call_id="same")
    run.tool_end("k1", result="first")
    run.tool_end("k2", error=ValueError("second"))
    run.end()
    assert_contract(rec.events)
    pre = [(c.tool_call_id, c.attempt) for c in rec.of("on_tool_pre")]
    post = [(c.tool_call_id, c.attempt, c.is_error) for c in rec.of("on_tool_post")]
    assert pre == [("same", 0), ("same", 1)]
    assert post == [("same", 0, False), ("same", 1, True)]
    assert len(rec.of("on_tool_call_received")) == 1


def test_end_closes_everything_once_from_an_error_path() -> None:
    """An error with a tool and a stream open: both end cancelled, turn and run end once."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.model_start("m1", model="m")
    run.model_end("m1", tool_calls=[FrameworkToolCall("c", "slow")])
    run.tool_start("t", tool="slow", call_id="c")
    run.end(error=RuntimeError("boom"))
    run.end()
    run.tool_end("t", result="late")
    run.model_start("m2", model="m")
    assert_contract(rec.events)
    (post,) = rec.of("on_tool_post")
    assert post.is_error
    assert isinstance(post.error, Cancelled)
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("failed", False)
    assert end.error.message == "RuntimeError: boom"
    assert rec.hooks()[-1] == "on_run_end"
    assert tracker.active_runs == 0


def test_cancellation_ends_the_open_stream_and_run_cancelled() -> None:
    """A run cancelled mid-stream: stream failure Cancelled, run status cancelled."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.model_start("m", model="m")
    run.text_delta("m", "par")
    run.end(error=asyncio.CancelledError())
    assert_contract(rec.events)
    (failure,) = rec.of("on_stream_failure")
    assert isinstance(failure.error, Cancelled)
    assert rec.of("on_run_end")[0].status == "cancelled"


def test_parallel_threads_keep_the_contract() -> None:
    """Tool calls started and ended from many threads at once still pair, before the turn ends."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.model_start("m", model="m")
    run.model_end("m", tool_calls=[FrameworkToolCall(f"c{i}", "t") for i in range(40)])

    def one(i: int) -> None:
        run.tool_start(i, tool="t", call_id=f"c{i}")
        run.tool_end(i, result=str(i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.end()
    assert_contract(rec.events)
    assert len(rec.of("on_tool_post")) == 40


def test_a_second_model_call_while_busy_is_refused() -> None:
    """A model call overlapping another of the same run emits nothing and returns False."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    assert run.model_start("a", model="m")
    assert run.busy
    assert not run.model_start("b", model="m")
    run.model_end("b", text="ignored")
    run.model_end("a", text="ok")
    run.end()
    assert_contract(rec.events)
    assert len(rec.of("on_stream_start")) == 1


def _loop(run: adapter_run.AdapterRun, calls: int) -> None:
    for i in range(calls):
        key = f"m{i}"
        run.model_start(key, model="m")
        run.model_end(key, tool_calls=[FrameworkToolCall(f"c{i}", "poll", {"job": "1"})])
        run.tool_start(f"t{i}", tool="poll", call_id=f"c{i}", arguments={"job": "1"})
        run.tool_end(f"t{i}", result="queued")


def test_a_stop_verdict_stops_the_run() -> None:
    """Repetition past stop_after marks the run stopped; the adapter raises RunStopped."""
    tracker, rec = _tracker(detectors=[RepetitionDetector(warn_after=2, stop_after=3)])
    run = tracker.start_run()
    _loop(run, 2)
    run.raise_if_stopped()
    _loop(run, 1)
    with pytest.raises(RunStopped) as caught:
        run.raise_if_stopped()
    stop = caught.value
    assert isinstance(stop, LoopDetected)
    assert stop.status == "loop_detected"
    assert stop.pattern.startswith("poll(args#")  # the arguments are content: a hash
    assert "poll(1)" not in str(stop)
    run.end(error=stop)
    assert_contract(rec.events)
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("loop_detected", False)
    assert [c.action for c in rec.of("on_loop_detected")] == ["warn", "stop"]
    run.raise_if_stopped()  # the run ended: nothing more to raise


def test_warn_leaves_the_run_alone() -> None:
    """A detector that only warns reports the loop and never stops the run."""
    tracker, rec = _tracker(detectors=[RepetitionDetector(warn_after=2, stop_after=0)])
    run = tracker.start_run()
    _loop(run, 6)
    run.raise_if_stopped()
    run.end()
    assert rec.of("on_run_end")[0].status == "completed"
    assert [c.action for c in rec.of("on_loop_detected")] == ["warn"]


def test_the_framework_failing_after_a_stop_ends_with_the_stop() -> None:
    """When the framework wraps our RunStopped into its own error, the run still ends stopped."""
    tracker, rec = _tracker(detectors=[RepetitionDetector(warn_after=2, stop_after=2)])
    run = tracker.start_run()
    _loop(run, 2)
    run.end(error=RuntimeError("framework wrapped it"))
    (end,) = rec.of("on_run_end")
    assert end.status == "loop_detected"
    assert isinstance(end.error, RunStopped)


def test_converged_answers_stop_with_status_converged() -> None:
    """A convergence verdict with action stop stops the run with status converged."""
    tracker, rec = _tracker(detectors=[ConvergenceDetector(consecutive=2, action="stop")])
    session = uuid.uuid4()
    for _ in range(2):
        run = tracker.start_run(session_id=session)
        run.model_start("m", model="m")
        run.model_end("m", text="the same answer")
        stop = run.stopped
        run.end(error=stop)
    assert stop is not None
    assert stop.status == "converged"
    assert rec.of("on_run_end")[-1].status == "converged"


def test_a_guard_can_stop_a_run() -> None:
    """Guards other than detectors stop a run through the same path."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    run.stop(RunStopped("over quota", status="over_quota"))
    run.stop(RunStopped("second stop loses"))
    with pytest.raises(RunStopped, match="over quota") as caught:
        run.raise_if_stopped()
    run.end(error=caught.value)
    (end,) = rec.of("on_run_end")
    assert end.status == "failed"  # a status the contract does not know
    assert end.error == caught.value


def test_run_stopped_round_trips_as_a_value() -> None:
    """RunStopped encodes and rebuilds like every LoopError (the JSONL log needs it)."""
    stop = RunStopped("stopped: x", pattern="x", status="converged")
    assert LoopError.from_dict(stop.to_dict()) == stop


class _Broken(LoopObserver):
    def on_tool_post(self, ctx: ToolPostContext) -> None:
        raise RuntimeError("observer bug")


def test_a_failing_observer_never_reaches_the_adapter(caplog: pytest.LogCaptureFixture) -> None:
    """An observer that raises is isolated: the run's calls return normally."""
    caplog.set_level(logging.CRITICAL, logger="loopobs.observer")
    tracker, rec = _tracker(_Broken(), detectors=[])
    run = tracker.start_run()
    run.tool_start("t", tool="x")
    run.tool_end("t", result="ok")
    run.end()
    assert tracker.observers.failure_count == 1
    assert_contract(rec.events)


def test_no_context_is_built_for_a_hook_nobody_listens_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no listener for on_tool_pre, ToolPreContext is never constructed."""
    built: list[object] = []

    def counting(**fields: object) -> ToolPreContext:
        ctx = ToolPreContext(**fields)  # type: ignore[arg-type]
        built.append(ctx)
        return ctx

    monkeypatch.setattr(adapter_run, "ToolPreContext", counting)
    tracker = RunTracker([], detectors=[])
    run = tracker.start_run()
    run.tool_start("t", tool="x")
    run.tool_end("t", result="ok")
    run.end()
    assert built == []
    tracker.attach(RecordingObserver())
    run = tracker.start_run()
    run.tool_start("t", tool="x")
    run.end()
    assert len(built) == 1


def test_shielded_swallows_bugs_but_lets_stops_and_cancellation_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hook's own exception is logged and swallowed; RunStopped and cancellation escape."""

    @shielded
    def hook(exc: BaseException) -> str:
        raise exc

    @shielded
    async def ahook(exc: BaseException) -> str:
        raise exc

    with caplog.at_level(logging.ERROR, logger="loopobs.adapters"):
        assert hook(ValueError("bug")) is None
        assert asyncio.run(ahook(ValueError("bug"))) is None
    assert "raised; the framework's run continues" in caplog.text
    with pytest.raises(RunStopped):
        hook(RunStopped("stop"))
    with pytest.raises(asyncio.CancelledError):
        hook(asyncio.CancelledError())
    with pytest.raises(RunStopped):
        asyncio.run(ahook(RunStopped("stop")))


def test_missing_extra_is_a_one_line_install_hint() -> None:
    """The ImportError names the adapter, the package and the pip command, on one line."""
    cause = ModuleNotFoundError("No module named 'langchain_core'", name="langchain_core")
    error = missing_extra("langchain", "langchain-core", "langchain", cause)
    assert isinstance(error, ImportError)
    assert "\n" not in str(error)
    assert "loopobs.adapters.langchain needs langchain-core" in str(error)
    assert "pip install 'loopobs[langchain]'" in str(error)


def test_a_call_id_reused_by_a_later_response_is_a_new_call() -> None:
    """A model reusing an id in a later turn: received again, attempt numbering restarts."""
    tracker, rec = _tracker(detectors=[])
    run = tracker.start_run()
    for turn in range(2):
        run.model_start(f"m{turn}", model="m")
        run.model_end(
            f"m{turn}", tool_calls=[FrameworkToolCall("same", "t"), FrameworkToolCall("same", "t")]
        )
        run.tool_start(f"a{turn}", tool="t", call_id="same")
        run.tool_start(f"b{turn}", tool="t", call_id="same")
        run.tool_end(f"a{turn}", result="x")
        run.tool_end(f"b{turn}", result="y")
    run.end()
    assert_contract(rec.events)
    assert [c.attempt for c in rec.of("on_tool_pre")] == [0, 1, 0, 1]
    assert len(rec.of("on_tool_call_received")) == 4


def test_a_budget_guard_among_the_detectors_stops_the_run() -> None:
    """BudgetGuard's stop verdict stops the run with status budget_exceeded; warn does not."""
    guard = BudgetGuard(Budget(total_tokens=100, warn_at=0.5))
    tracker, rec = _tracker(detectors=[guard])
    run = tracker.start_run()
    run.model_start("m1", model="m")
    run.model_end("m1", usage=Usage(input_tokens=50, output_tokens=10))
    run.raise_if_stopped()  # 60 of 100: a warning only
    run.model_start("m2", model="m")
    run.model_end("m2", usage=Usage(input_tokens=40, output_tokens=10))
    with pytest.raises(RunStopped) as caught:
        run.raise_if_stopped()
    assert caught.value.status == "budget_exceeded"
    assert "total_tokens" in str(caught.value)
    run.end(error=caught.value)
    assert [c.action for c in rec.of("on_budget_exceeded")] == ["warn", "stop"]
    assert rec.of("on_run_end")[0].status == "budget_exceeded"
    assert_contract(rec.events)


def test_model_calls_are_priced_like_agent_loop_does() -> None:
    """prices=: each call's cost_usd, the turn's and the run's; an unpriced call makes the
    run's cost unknown (None), never 0."""
    tracker, rec = _tracker(
        detectors=[], prices={"m": ModelRates(input_per_mtok=2.0, output_per_mtok=8.0)}
    )
    run = tracker.start_run()
    run.model_start("a", model="m")
    run.model_end("a", usage=Usage(input_tokens=1_000_000, output_tokens=500_000))
    run.end()
    assert rec.of("on_stream_success")[0].cost_usd == pytest.approx(6.0)
    assert rec.of("on_turn_end")[0].cost_usd == pytest.approx(6.0)
    assert rec.of("on_run_end")[0].cost_usd == pytest.approx(6.0)
    run = tracker.start_run()
    run.model_start("b", model="m")
    run.model_end("b", usage=Usage(input_tokens=10, output_tokens=1))
    run.model_start("c", model="unknown-model")
    run.model_end("c", usage=Usage(input_tokens=10, output_tokens=1))
    run.end()
    assert rec.of("on_stream_success")[-1].cost_usd is None
    assert rec.of("on_run_end")[-1].cost_usd is None


@pytest.mark.parametrize("bad", [-5, 2**70, float("nan"), float("inf"), 2.5, "12"])
def test_implausible_token_counts_are_unknown_never_passed_through(bad: object) -> None:
    """The model clients' rules in every adapter: a negative, absurd or non-integer count is
    unknown (0), counted, and leaves the call's cost unknown; the good counts stay."""
    tracker, rec = _tracker(
        detectors=[], prices={"m": ModelRates(input_per_mtok=2.0, output_per_mtok=8.0)}
    )
    run = tracker.start_run()
    run.model_start("a", model="m")
    run.model_end(
        "a",
        usage=Usage(
            input_tokens=adapter_run.token_count(bad), output_tokens=adapter_run.token_count(7)
        ),
    )
    run.end()
    (ok,) = rec.of("on_stream_success")
    assert (ok.input_tokens, ok.output_tokens) == (0, 7)
    assert ok.cost_usd is None
    end = rec.of("on_run_end")[0]
    assert (end.input_tokens, end.output_tokens) == (0, 7)
    assert tracker.rejected_token_counts == 1
    assert_contract(rec.events)


def test_token_count_takes_integral_floats_and_none() -> None:
    assert adapter_run.token_count(None) == 0
    assert adapter_run.token_count(12.0) == 12
    assert type(adapter_run.token_count(12.0)) is int
