"""What the OpenAI Agents SDK and pydantic-ai adapters add to a framework run.

Run: ``.venv/bin/python bench/bench_framework_adapters.py`` (``--quick``: fewer rounds).

For each framework, the same offline run (``TURNS`` tool turns, then an answer; the
SDK driven by a scripted ``Model``, pydantic-ai by a ``FunctionModel``) is timed

- bare: the framework alone (``Runner.run`` / ``agent.run``; the SDK always awaits its
  run hooks, no-op ones when none are given);
- pass-through (pydantic-ai): a capability with the adapter's three hooks, each only
  calling its handler: what the framework charges for hooks, whoever uses them;
- adapter: through the adapter with one no-op observer that listens to every hook
  (so every context is built and delivered) and no detectors: the adapter's own cost;
- adapter + detectors: the same with the default repetition and convergence detectors.

Rounds interleave the variants. Times are this process's CPU time per run
(``time.process_time_ns``): on a shared machine wall time mostly measures the
neighbours. The table shows the best and median per run, and the ratio of each to
the bare run's, measured in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import fmt_ns, print_table
from loopobs.core.events import HOOKS, EventContext
from loopobs.core.observer import LoopObserver

__all__ = ["NoOp", "main"]

TURNS = 20


class NoOp(LoopObserver):
    """Listens to every hook and does nothing: the contexts are built and delivered."""


def _noop(self: NoOp, ctx: EventContext) -> None:
    return None


for _hook in HOOKS:
    setattr(NoOp, _hook, _noop)


Variant = Callable[[], Awaitable[Any]]


def _agents_variants() -> dict[str, Variant]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled

    from loopobs.adapters.openai_agents import AgentsAdapter
    from tests._agents_model import ScriptModel, message, tool_call

    set_tracing_disabled(True)

    @function_tool
    def lookup(step: int) -> str:
        """Look a step up."""
        return f"step {step}"

    def agent() -> Agent[Any]:
        steps: list[Any] = [[tool_call("lookup", {"step": i}, f"c{i}")] for i in range(TURNS)]
        return Agent(name="bench", model=ScriptModel([*steps, [message("done")]]),
                     tools=[lookup])

    plain = AgentsAdapter([NoOp()], detectors=[])
    detecting = AgentsAdapter([NoOp()])
    return {
        "bare": lambda: Runner.run(agent(), "go", max_turns=TURNS + 5),
        "adapter": lambda: plain.run(agent(), "go", max_turns=TURNS + 5),
        "adapter + detectors": lambda: detecting.run(agent(), "go", max_turns=TURNS + 5),
    }


def _pydantic_ai_variants() -> dict[str, Variant]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from loopobs.adapters.pydantic_ai import LoopobsCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(messages) // 2
        if step < TURNS:
            return ModelResponse(parts=[ToolCallPart("lookup", {"step": step},
                                                     tool_call_id=f"c{step}")])
        return ModelResponse(parts=[TextPart("done")])

    def lookup(step: int) -> str:
        """Look a step up."""
        return f"step {step}"

    def agent(*capabilities: Any) -> Agent[None, str]:
        a: Agent[None, str] = Agent(FunctionModel(respond), name="bench",
                                    capabilities=list(capabilities))
        a.tool_plain(lookup)
        return a

    bare = agent()
    passing = agent(_pass_through())
    plain = agent(LoopobsCapability([NoOp()], detectors=[]))
    detecting = agent(LoopobsCapability([NoOp()]))
    return {
        "bare": lambda: bare.run("go"),
        "pass-through hooks": lambda: passing.run("go"),
        "adapter": lambda: plain.run("go"),
        "adapter + detectors": lambda: detecting.run("go"),
    }


def _pass_through() -> Any:
    from pydantic_ai.capabilities import AbstractCapability

    class PassThrough(AbstractCapability[Any]):
        """The adapter's hooks, doing nothing but calling on."""

        async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
            return await handler()

        async def wrap_model_request(self, ctx: Any, *, request_context: Any,
                                     handler: Any) -> Any:
            return await handler(request_context)

        async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any,
                                    handler: Any) -> Any:
            return await handler(args)

    return PassThrough()


async def _measure(variants: dict[str, Variant], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up
        await fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            started = time.process_time_ns()
            await fn()
            times[name].append(time.process_time_ns() - started)
    return times


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Time every variant of both frameworks; print a table; return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 30")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 30
    rows: list[dict[str, Any]] = []
    for framework, build in (("openai-agents", _agents_variants),
                             ("pydantic-ai", _pydantic_ai_variants)):
        times = asyncio.run(_measure(build(), rounds))
        bare_best, bare_median = min(times["bare"]), statistics.median(times["bare"])
        for name, samples in times.items():
            best, median = min(samples), statistics.median(samples)
            rows.append({"framework": framework, "name": name, "best_ns": best,
                         "median_ns": median, "best_ratio": best / bare_best,
                         "median_ratio": median / bare_median})
    print_table(
        ["framework", f"run ({TURNS} tool turns + answer), CPU", "best", "median",
         "best vs bare", "median vs bare"],
        [[r["framework"], r["name"], fmt_ns(r["best_ns"]), fmt_ns(r["median_ns"]),
          f"{r['best_ratio']:.2f}×", f"{r['median_ratio']:.2f}×"] for r in rows])
    return rows


if __name__ == "__main__":
    main()
