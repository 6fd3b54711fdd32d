"""RunPolicy: detector verdicts are queued for the loop's own runs and applied in one place."""

from __future__ import annotations

import uuid

from loopobs import (
    ConvergenceAction,
    ConvergenceDetectedContext,
    Conversation,
    LoopAction,
    LoopDetected,
    LoopDetectedContext,
    RunStatus,
)
from loopobs.loop.policy import NOTE_PREFIX, RunPolicy


def loop_verdict(run_id: uuid.UUID, action: LoopAction) -> LoopDetectedContext:
    return LoopDetectedContext(
        run_id=run_id, time_ns=1, pattern="search(x)", repetitions=5, tool="search", action=action
    )


def convergence(run_id: uuid.UUID, action: ConvergenceAction) -> ConvergenceDetectedContext:
    return ConvergenceDetectedContext(
        run_id=run_id, time_ns=1, action=action, similarity=0.97, consecutive=3
    )


def test_only_open_runs_collect_verdicts() -> None:
    """A verdict for a run the policy was not opened for (another loop's) is ignored."""
    policy, mine, other = RunPolicy(), uuid.uuid4(), uuid.uuid4()
    policy.open(mine)
    policy.on_loop_detected(loop_verdict(other, "stop"))
    policy.on_loop_detected(loop_verdict(mine, "warn"))
    assert [v.run_id for v in policy.take(mine)] == [mine]
    assert policy.take(other) == []
    assert policy.take(mine) == []  # taking empties the queue
    policy.close(mine)
    assert policy.open_runs == 0
    policy.on_loop_detected(loop_verdict(mine, "stop"))
    assert policy.take(mine) == []


def test_a_stop_ends_the_run_with_the_detector_status() -> None:
    """stop and ask_user stop the run: loop_detected for loops, converged for answers."""
    policy, run, session = RunPolicy(), uuid.uuid4(), Conversation()
    policy.open(run)
    policy.on_loop_detected(loop_verdict(run, "stop"))
    stop = policy.apply(run, session)
    assert stop is not None
    assert stop.status is RunStatus.LOOP_DETECTED
    assert isinstance(stop.error, LoopDetected)
    assert stop.error.pattern == "search(…)"  # never the arguments: the error reaches telemetry
    policy.on_convergence_detected(convergence(run, "ask_user"))
    stop = policy.apply(run, session)
    assert stop is not None
    assert stop.status is RunStatus.CONVERGED
    assert policy.apply(run, session) is None


def test_the_first_stop_wins_and_later_verdicts_still_apply() -> None:
    """Two stops: the first is the run's; a compaction request queued after still lands."""
    policy, run, session = RunPolicy(), uuid.uuid4(), Conversation()
    policy.open(run)
    policy.on_convergence_detected(convergence(run, "stop"))
    policy.on_loop_detected(loop_verdict(run, "stop"))
    policy.on_convergence_detected(convergence(run, "compact"))
    stop = policy.apply(run, session)
    assert stop is not None
    assert stop.status is RunStatus.CONVERGED
    assert session.compact_requested


def test_warnings_become_notes_for_the_next_request() -> None:
    """warn and switch_phase add a note each; nothing stops; compact only sets the flag."""
    policy, run, session = RunPolicy(), uuid.uuid4(), Conversation()
    policy.open(run)
    policy.on_loop_detected(loop_verdict(run, "warn"))
    policy.on_convergence_detected(convergence(run, "switch_phase"))
    assert policy.apply(run, session) is None
    assert len(session.pending_notes) == 2
    assert all(n.startswith(NOTE_PREFIX) for n in session.pending_notes)
    assert "search(x) repeated 5 times" in session.pending_notes[0]
    assert "last 3 answers" in session.pending_notes[1]
    assert not session.compact_requested


def test_decide_is_the_one_mapping_and_the_adapters_raise_its_words() -> None:
    """A budget stop is budget_exceeded with BudgetExceeded's message; a budget warning changes
    nothing; the adapters' RunStopped says exactly what the loop's error says."""
    from loopobs import BudgetExceeded, BudgetExceededContext
    from loopobs.adapters import RunStopped, StopPolicy
    from loopobs.loop.policy import Decision, decide

    run = uuid.uuid4()
    over = BudgetExceededContext(
        run_id=run, time_ns=1, limit="model_calls", value=4.0, budget=3.0, action="stop"
    )
    decision = decide(over)
    assert decision.stop is not None
    assert decision.stop.status is RunStatus.BUDGET_EXCEEDED
    assert isinstance(decision.stop.error, BudgetExceeded)
    assert decision.stop.message == "run budget exceeded: model_calls 4 > 3"
    assert (
        decide(
            BudgetExceededContext(
                run_id=run, time_ns=1, limit="usd", value=0.8, budget=1.0, action="warn"
            )
        )
        == Decision()
    )
    for verdict in (over, loop_verdict(run, "stop"), convergence(run, "ask_user")):
        policy = StopPolicy()
        policy.watch(run)
        getattr(policy, verdict.hook)(verdict)
        raised = policy.stopped(run)
        stop = decide(verdict).stop
        assert isinstance(raised, RunStopped)
        assert stop is not None
        assert (str(raised), raised.status, raised.pattern) == (
            stop.message,
            stop.status.value,
            stop.pattern,
        )
        assert policy.stopped(run) is raised  # the same exception each time it is raised
