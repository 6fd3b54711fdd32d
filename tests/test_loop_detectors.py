"""AgentLoop detectors seam: verdicts emitted into the set are applied (stop, warn, compact)."""

from __future__ import annotations

from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    ConvergenceDetectedContext,
    LoopDetected,
    LoopDetectedContext,
    LoopObserver,
    ObserverSet,
    ResponseContext,
    RunStatus,
    ToolPostContext,
)
from loopobs.contract.events import ConvergenceAction, LoopAction
from loopobs.contract.model import ModelRequest
from loopobs.detectors import ConvergenceDetector, RepetitionDetector
from loopobs.llm import Reply, ScriptedClient, Step, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_support import make_loop, names, search, u

TOOL_TURN = Reply(tool_calls=(ToolCall("search", {"query": "a"}, id="c1"),), usage=u(1, 1))
ANSWER = Reply(text="done", usage=u(1, 1))


class OnSecondPost(LoopObserver):
    """A hand-written detector: its verdict goes into every set it is attached to."""

    def __init__(self, action: LoopAction) -> None:
        self.action = action
        self.targets: list[ObserverSet] = []
        self.posts = 0

    def on_attach(self, observers: ObserverSet) -> None:
        self.targets.append(observers)

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        self.posts += 1
        if self.posts == 2:
            for target in self.targets:
                target.on_loop_detected(
                    LoopDetectedContext(
                        run_id=ctx.run_id,
                        time_ns=ctx.time_ns,
                        pattern="search(a)",
                        repetitions=2,
                        tool="search",
                        action=self.action,
                    )
                )


async def test_a_stop_verdict_ends_the_run_loop_detected() -> None:
    """A detector's stop ends the run with status loop_detected after the turn's tools."""
    detector = OnSecondPost("stop")
    loop, rec, client = make_loop([TOOL_TURN, TOOL_TURN, ANSWER], detectors=[detector])
    result = await loop.run("q")
    assert result.status is RunStatus.LOOP_DETECTED
    assert isinstance(result.error, LoopDetected)
    assert result.error.pattern == "search(…)"  # the tool without its arguments (content)
    assert len(client.requests) == 2
    assert result.messages[-1].role == "tool"
    events = names(rec.events)
    at = events.index("on_loop_detected")
    assert events[at - 1] == "on_tool_post"
    assert events[at + 1 :] == ["on_turn_end", "on_run_end"]
    assert rec.of("on_turn_end")[-1].success is False
    end = rec.of("on_run_end")[0]
    assert (end.status, end.success) == ("loop_detected", False)
    assert_contract(rec.events)


async def test_a_warn_verdict_adds_a_note_to_the_next_request() -> None:
    """A warn verdict becomes a note in the next model request only; the run goes on."""
    loop, rec, client = make_loop(
        [TOOL_TURN, TOOL_TURN, ANSWER, ANSWER], detectors=[OnSecondPost("warn")]
    )
    result = await loop.run("q")
    assert result.ok
    last = client.requests[2].messages[-1]
    assert last.role == "user"
    assert "[loopobs] Note: the tool call pattern search(a) repeated 2 times" in last.content
    assert not any("[loopobs]" in m.content for m in result.messages)
    await loop.run("again", session=result.session)
    assert not any("[loopobs]" in m.content for m in client.requests[3].messages)
    assert_contract(rec.events)


class ConvergeOnToolTurn(LoopObserver):
    """Emits a convergence verdict on response number ``at``, even one that calls tools."""

    def __init__(self, action: ConvergenceAction, at: int = 1) -> None:
        self.action = action
        self.at = at
        self.targets: list[ObserverSet] = []
        self.seen = 0

    def on_attach(self, observers: ObserverSet) -> None:
        self.targets.append(observers)

    def on_response(self, ctx: ResponseContext) -> None:
        self.seen += 1
        if self.seen != self.at:
            return
        for target in self.targets:
            target.on_convergence_detected(
                ConvergenceDetectedContext(
                    run_id=ctx.run_id,
                    time_ns=ctx.time_ns,
                    action=self.action,
                    similarity=1.0,
                    consecutive=3,
                )
            )


async def test_a_stop_verdict_on_a_tool_calling_response_is_not_lost() -> None:
    """A stop on a response that asks for tools lets the tools run, then ends the run."""
    loop, rec, client = make_loop([TOOL_TURN, ANSWER], detectors=[ConvergeOnToolTurn("stop")])
    result = await loop.run("q")
    assert result.status is RunStatus.CONVERGED
    assert len(client.requests) == 1
    assert [m.role for m in result.messages][-2:] == ["assistant", "tool"]
    assert_contract(rec.events)


async def test_a_compact_verdict_compacts_before_the_next_call() -> None:
    """A compact verdict compacts the conversation before the next model call."""
    long = Reply(tool_calls=(ToolCall("search", {"query": "x" * 400}),), usage=u(1, 1))
    loop, rec, _ = make_loop(
        [long, long, long, ANSWER], detectors=[ConvergeOnToolTurn("compact", at=3)]
    )
    result = await loop.run("q")
    assert result.ok
    compactions = rec.of("on_compaction")
    assert [c.reason for c in compactions] == ["detector"]
    assert compactions[0].messages_removed > 0
    events = names(rec.events)
    at = events.index("on_compaction")
    assert events[at - 1] == "on_turn_end"
    assert events[at + 1] == "on_turn_start"
    assert_contract(rec.events)


def _same_call(request: ModelRequest) -> Step:
    return Reply(tool_calls=(ToolCall("search", {"query": "same"}),), usage=u(2, 1))


async def test_the_default_repetition_detector_warns_then_stops() -> None:
    """With detectors=None, the same call repeated warns at 3 and stops the run at 5: the same
    call with the same result and nothing changed since is unambiguous."""
    rec = RecordingObserver()
    client = ScriptedClient(_same_call)
    loop = AgentLoop(client, model="m1", tools=[search], observers=[rec])
    assert [type(d) for d in loop.detectors] == [RepetitionDetector, ConvergenceDetector]
    result = await loop.run("q")
    assert result.status is RunStatus.LOOP_DETECTED
    assert result.turns == 5
    assert result.usage == u(10, 5)
    detections = rec.of("on_loop_detected")
    assert [(d.action, d.repetitions) for d in detections] == [("warn", 3), ("stop", 5)]
    assert detections[0].pattern == "search(same)"
    assert "[loopobs] Note" in client.requests[3].messages[-1].content
    assert_contract(rec.events)


@pytest.mark.parametrize(
    ("action", "status"), [("stop", RunStatus.CONVERGED), ("warn", RunStatus.COMPLETED)]
)
async def test_the_convergence_detector_across_runs_of_a_session(
    action: Any,
    status: RunStatus,
) -> None:
    """Identical answers over a session's runs converge; stop ends the run converged."""
    rec = RecordingObserver()
    client = ScriptedClient(lambda request: Reply(text="Paris is the capital.", usage=u(1, 1)))
    loop = AgentLoop(
        client,
        model="m1",
        observers=[rec],
        detectors=[ConvergenceDetector(consecutive=2, action=action)],
    )
    first = await loop.run("capital?")
    second = await loop.run("capital, really?", session=first.session)
    assert first.status is RunStatus.COMPLETED
    assert second.status is status
    assert second.answer == "Paris is the capital."
    events = names(rec.for_run(second.run_id))
    at = events.index("on_convergence_detected")
    assert events[at - 1] == "on_response"
    assert events[at + 1] == "on_turn_end"
    assert_contract(rec.events)


async def test_convergence_compact_reaches_the_next_run_of_the_session() -> None:
    """A 'compact' verdict on a final answer compacts before the session's next model call."""
    answer = "The limit is two thousand euros per trip, approved by finance."
    steps: list[Step] = [Reply(text=answer, usage=u(1, 1)) for _ in range(4)]
    recorder = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient(steps),
        model="m1",
        observers=[recorder],
        detectors=[ConvergenceDetector(consecutive=3, action="compact")],
    )
    session = None
    for _ in range(4):
        result = await loop.run("What is the limit, really?", session=session)
        session = result.session
    hooks = recorder.hooks()
    assert hooks.count("on_convergence_detected") == 1
    (compaction,) = recorder.of("on_compaction")
    assert compaction.reason == "detector"
    assert compaction.messages_removed > 0
    # it happened in the run after the detection, before that run's model call
    detected_at = hooks.index("on_convergence_detected")
    assert hooks.index("on_compaction") > hooks.index("on_run_start", detected_at)
    assert_contract(recorder.events)
