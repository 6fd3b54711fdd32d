"""The detectors inside AgentLoop: runaway loops stopped, warnings to the model, convergence."""

from __future__ import annotations

from loopobs import (
    AgentLoop,
    ConvergenceDetector,
    Conversation,
    LoopDetected,
    RepetitionDetector,
    RunStatus,
    tool,
)
from loopobs.contract.model import UserMessage
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver


@tool
def read_file(path: str) -> str:
    """Read a file (always the same text)."""
    return f"contents of {path}"


def _reads(n: int, path: str = "/etc/hosts") -> list[Reply]:
    return [Reply(text="", tool_calls=(ToolCall("read_file", {"path": path}),)) for _ in range(n)]


def _notes(client: ScriptedClient, request: int) -> list[str]:
    return [
        m.content
        for m in client.requests[request].messages
        if isinstance(m, UserMessage) and m.content.startswith("[loopobs]")
    ]


async def test_runaway_loop_is_stopped_with_loop_detected() -> None:
    """The default detectors stop a model that re-reads one file forever, at the fifth call:
    the same call, the same result and nothing changed is unambiguous."""
    client = ScriptedClient(_reads(30))
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m", tools=[read_file], observers=[rec], max_turns=30)
    result = await loop.run("what is in /etc/hosts?")
    assert result.status is RunStatus.LOOP_DETECTED
    assert isinstance(result.error, LoopDetected)
    assert result.error.pattern.startswith("read_file(args#")  # content-free: a hash
    assert "/etc/hosts" not in str(result.error)
    assert rec.of("on_loop_detected")[-1].pattern == "read_file(/etc/hosts)"
    assert result.turns == 5
    assert [(e.action, e.repetitions) for e in rec.of("on_loop_detected")] == [
        ("warn", 3),
        ("stop", 5),
    ]
    assert client.remaining == 25


async def test_warning_reaches_the_next_request() -> None:
    """After the third identical call the next model request carries a note naming the pattern."""
    client = ScriptedClient([*_reads(3), Reply(text="done")])
    loop = AgentLoop(client, model="m", tools=[read_file])
    result = await loop.run("read it")
    assert result.ok
    assert [_notes(client, i) for i in range(3)] == [[], [], []]
    [note] = _notes(client, 3)
    assert "read_file(/etc/hosts)" in note
    assert "3 times" in note


async def test_a_cycle_warning_names_the_cycle() -> None:
    """An A→B oscillation is reported as one pattern to the model, after two passes."""
    steps = []
    for _ in range(2):
        steps.extend(_reads(1, "a"))
        steps.extend(_reads(1, "b"))
    client = ScriptedClient([*steps, Reply(text="done")])
    loop = AgentLoop(client, model="m", tools=[read_file])
    assert (await loop.run("compare a and b")).ok
    [note] = _notes(client, 4)
    assert "read_file(a) → read_file(b)" in note


async def test_converged_answers_across_runs_of_one_session() -> None:
    """The same answer three runs in a row, with action stop, ends the third run ``converged``."""
    client = ScriptedClient([Reply(text=t) for t in ["It is 42.", "it is 42", "It is: 42!"]])
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m",
        observers=[rec],
        detectors=[RepetitionDetector(), ConvergenceDetector(action="stop")],
    )
    session = Conversation()
    first = await loop.run("what is it?", session=session)
    second = await loop.run("are you sure?", session=session)
    third = await loop.run("really?", session=session)
    assert first.ok
    assert second.ok
    assert third.status is RunStatus.CONVERGED
    assert isinstance(third.error, LoopDetected)
    [event] = rec.of("on_convergence_detected")
    assert (event.run_id, event.action, event.consecutive) == (third.run_id, "stop", 3)


async def test_other_sessions_do_not_converge() -> None:
    """Three sessions giving the same answer once each are not a convergence."""
    client = ScriptedClient([Reply(text="It is 42.")] * 3)
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m",
        observers=[rec],
        detectors=[ConvergenceDetector(consecutive=2, action="stop")],
    )
    for _ in range(3):
        assert (await loop.run("what is it?")).ok
    assert rec.of("on_convergence_detected") == []


async def test_empty_detectors_disable_detection() -> None:
    """``detectors=[]``: twelve identical calls run to the answer with no detection."""
    client = ScriptedClient([*_reads(12), Reply(text="done")])
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m", tools=[read_file], observers=[rec], detectors=[])
    result = await loop.run("read it")
    assert result.ok
    assert result.answer == "done"
    assert rec.of("on_loop_detected") == []
    assert all(_notes(client, i) == [] for i in range(13))


async def test_default_detectors_are_the_documented_ones() -> None:
    """``detectors=None`` installs a RepetitionDetector and a ConvergenceDetector."""
    loop = AgentLoop(ScriptedClient([]), model="m")
    assert [type(d) for d in loop.detectors] == [RepetitionDetector, ConvergenceDetector]
