"""Helpers shared by the ``test_loop_*`` files: tools, a recorder per loop, usage sums."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from loopobs import AgentLoop, LoopObserver, RunResult, Usage, tool
from loopobs.contract.events import CONTEXT_TYPES, EventContext
from loopobs.llm import Reply, ScriptedClient, Step
from loopobs.testing import RecordingObserver, assert_contract


@tool
def search(query: str, limit: int = 3) -> str:
    """Search the web for ``query``."""
    return f"results for {query} (limit {limit})"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await asyncio.sleep(0)
    return a + b


@tool
def explode(reason: str = "boom") -> str:
    """Always raises."""
    raise RuntimeError(reason)


def u(i: int, o: int) -> Usage:
    """A usage of ``i`` input and ``o`` output tokens."""
    return Usage(input_tokens=i, output_tokens=o)


def scripted_usage(steps: Sequence[Step]) -> Usage:
    """The sum of the usages of the replies in ``steps``."""
    total = Usage()
    for step in steps:
        if isinstance(step, Reply) and step.usage is not None:
            total = total + step.usage
    return total


def make_loop(
    steps: Any, *, tools: Sequence[Any] = (search, add), **kwargs: Any
) -> tuple[AgentLoop, RecordingObserver, ScriptedClient]:
    """A loop over a ScriptedClient playing ``steps`` (or over a given client), with a recorder."""
    rec = RecordingObserver()
    client = steps if hasattr(steps, "stream") else ScriptedClient(steps)
    kwargs.setdefault("detectors", [])
    loop = AgentLoop(client, model="m1", tools=tools, observers=[rec], **kwargs)
    return loop, rec, client


def names(
    events: Sequence[tuple[str, EventContext]],
    skip: frozenset[str] = frozenset({"on_text_delta", "on_thinking_delta"}),
) -> list[str]:
    """Hook names, leaving out deltas by default."""
    return [h for h, _ in events if h not in skip]


def checked(rec: RecordingObserver, result: RunResult) -> Sequence[tuple[str, EventContext]]:
    """The run's events, after asserting the contract on the whole recording."""
    assert_contract(rec.events)
    return rec.for_run(result.run_id)


class Raising(LoopObserver):
    """Raises in every hook."""


def _raise(self: Raising, ctx: EventContext) -> None:
    raise RuntimeError(f"observer failure in {ctx.hook}")


for _hook in CONTEXT_TYPES:  # every hook, as declared once in the contract
    setattr(Raising, _hook, _raise)
