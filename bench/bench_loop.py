"""The AgentLoop's own overhead per turn, as a ratio to driving the same script by hand.

Every turn of the script is one model reply asking for one tool call, and the
last reply answers. The client is a zero-latency :class:`ScriptedClient`, so what
is measured is the loop: events, contexts, validation, tasks, bookkeeping. The
baseline, measured in the same process, iterates the same client's streams and
calls the tool function directly. Figures are the best of several rounds.

Run: ``.venv/bin/python bench/bench_loop.py``
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from loopobs import AgentLoop, LoopObserver, Usage, tool
from loopobs.contract.events import CONTEXT_TYPES, EventContext
from loopobs.contract.model import (
    AssistantMessage,
    ModelRequest,
    ToolCallReady,
    ToolResultMessage,
    UserMessage,
)
from loopobs.llm import Reply, ScriptedClient, ToolCall

TURNS = 50
ROUNDS = 7
RUNS_PER_ROUND = 20


async def lookup(key: str, n: int) -> str:
    """The tool: cheap and async, so the measurement is the loop around it."""
    return f"{key}={n}"


LOOKUP = tool(lookup)


def script() -> list[Reply]:
    """TURNS tool turns with distinct arguments, then an answer."""
    steps = [
        Reply(
            text="looking",
            tool_calls=(ToolCall("lookup", {"key": "k", "n": i}),),
            usage=Usage(input_tokens=100 + i, output_tokens=10),
        )
        for i in range(TURNS - 1)
    ]
    steps.append(Reply(text="the answer", usage=Usage(input_tokens=200, output_tokens=20)))
    return steps


class NoOp(LoopObserver):
    """Listens to every hook and does nothing."""


def _noop(self: NoOp, ctx: EventContext) -> None:
    return None


for _hook in CONTEXT_TYPES:  # every hook, as declared once in the contract
    setattr(NoOp, _hook, _noop)


async def by_hand() -> None:
    """The same script, driven directly: stream every reply, call the tool, append messages."""
    client = ScriptedClient(script())
    tools = {"lookup": lookup}
    messages: list[Any] = [UserMessage(content="go")]
    while True:
        calls = []
        text = []
        async for event in client.stream(ModelRequest(model="m1", messages=tuple(messages))):
            if isinstance(event, ToolCallReady):
                calls.append(event.call)
            elif hasattr(event, "text"):
                text.append(event.text)
        messages.append(AssistantMessage(content="".join(text), tool_calls=tuple(calls)))
        if not calls:
            return
        for call in calls:
            out = await tools[call.name](**call.arguments)
            messages.append(ToolResultMessage(tool_call_id=call.id, name=call.name, content=out))


def _loop(observers: int, detectors: Any) -> Any:
    async def run() -> None:
        loop = AgentLoop(
            ScriptedClient(script()),
            model="m1",
            tools=[LOOKUP],
            observers=[NoOp() for _ in range(observers)],
            detectors=detectors,
            max_turns=TURNS + 1,
        )
        result = await loop.run("go")
        assert result.ok, result.error
        assert result.turns == TURNS

    return run


async def _round(fn: Any) -> float:
    """Seconds per turn of RUNS_PER_ROUND runs of ``fn``."""
    start = time.perf_counter()
    for _ in range(RUNS_PER_ROUND):
        await fn()
    return (time.perf_counter() - start) / (RUNS_PER_ROUND * TURNS)


async def measure() -> list[dict[str, Any]]:
    """Per-turn cost of each case (best and median of interleaved rounds), ratio to by hand."""
    cases = [
        ("by hand (baseline)", by_hand),
        ("AgentLoop, no observers, no detectors", _loop(0, [])),
        ("AgentLoop, 3 no-op observers, no detectors", _loop(3, [])),
        ("AgentLoop, 3 no-op observers, default detectors", _loop(3, None)),
    ]
    for _, fn in cases:
        await fn()  # warm up
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(ROUNDS):  # interleaved, so load changes on a shared machine hit every case
        for name, fn in cases:
            times[name].append(await _round(fn))
    base = min(times[cases[0][0]])
    return [
        {
            "case": name,
            "us_per_turn": min(t) * 1e6,
            "median_us_per_turn": statistics.median(t) * 1e6,
            "ratio": min(t) / base,
        }
        for name, t in times.items()
    ]


def main() -> list[dict[str, Any]]:
    """Run the benchmark, print a table, return its rows."""
    rows = asyncio.run(measure())
    print(f"{'case':<50} {'µs/turn':>9} {'median':>9} {'× baseline':>11}")
    for row in rows:
        print(
            f"{row['case']:<50} {row['us_per_turn']:>9.1f} "
            f"{row['median_us_per_turn']:>9.1f} {row['ratio']:>11.2f}"
        )
    return rows


if __name__ == "__main__":
    main()
