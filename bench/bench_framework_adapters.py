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

A second table isolates the adapter's own work: the same run's hook calls (model
call, response with one tool call, tool start and end, per turn), fed straight into
each adapter with the no-op observer, without the framework; its share of the bare
framework run is what the adapter adds.

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
from loopobs.contract.events import HOOKS, EventContext
from loopobs.contract.observer import LoopObserver

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
    from agents import Agent, Runner, function_tool, set_trace_processors

    from loopobs.adapters.openai_agents import AgentsAdapter
    from tests._agents_model import ScriptModel, message, tool_call

    set_trace_processors([])  # SDK tracing on, as by default, exporting nowhere

    @function_tool
    def lookup(step: int) -> str:
        """Look a step up."""
        return f"step {step}"

    def agent() -> Agent[Any]:
        steps: list[Any] = [[tool_call("lookup", {"step": i}, f"c{i}")] for i in range(TURNS)]
        return Agent(name="bench", model=ScriptModel([*steps, [message("done")]]), tools=[lookup])

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
            return ModelResponse(
                parts=[ToolCallPart("lookup", {"step": step}, tool_call_id=f"c{step}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    def lookup(step: int) -> str:
        """Look a step up."""
        return f"step {step}"

    def agent(*capabilities: Any) -> Agent[None, str]:
        a: Agent[None, str] = Agent(
            FunctionModel(respond), name="bench", capabilities=list(capabilities)
        )
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

        async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
            return await handler(request_context)

        async def wrap_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
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


def _agents_hooks_only() -> Variant:
    """One run's worth of SDK hook calls into ``ObservedRunHooks``, no ``Runner``."""
    from agents import Agent, ModelResponse, RunContextWrapper, function_tool
    from agents.tool_context import ToolContext

    from loopobs.adapters.openai_agents import AgentsAdapter, ObservedRunHooks
    from tests._agents_model import message, tool_call, usage_of_one_call

    @function_tool
    def lookup(step: int) -> str:
        """Look a step up."""
        return f"step {step}"

    adapter = AgentsAdapter([NoOp()], detectors=[])
    agent: Agent[Any] = Agent(name="bench", model="m", tools=[lookup])
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)
    calls = [
        ModelResponse(
            output=[tool_call("lookup", {"step": i}, f"c{i}")],
            usage=usage_of_one_call(),
            response_id=None,
        )
        for i in range(TURNS)
    ]
    answer = ModelResponse(output=[message("done")], usage=usage_of_one_call(), response_id=None)
    tools = [
        ToolContext(
            None, tool_name="lookup", tool_call_id=f"c{i}", tool_arguments=f'{{"step": {i}}}'
        )
        for i in range(TURNS)
    ]

    async def run() -> None:
        run = adapter.tracker.start_run(agent="bench", model="m")
        hooks = ObservedRunHooks(run, None)
        for i in range(TURNS):
            await hooks.on_llm_start(context, agent, None, [])
            await hooks.on_llm_end(context, agent, calls[i])
            await hooks.on_tool_start(tools[i], agent, lookup)
            await hooks.on_tool_end(tools[i], agent, lookup, f"step {i}")
        await hooks.on_llm_start(context, agent, None, [])
        await hooks.on_llm_end(context, agent, answer)
        hooks.finish()

    return run


def _pydantic_ai_hooks_only() -> Variant:
    """One run's worth of capability hook calls into ``LoopobsCapability``, no agent graph."""
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RunUsage

    from loopobs.adapters.pydantic_ai import LoopobsCapability

    capability = LoopobsCapability([NoOp()], detectors=[])
    model = TestModel()
    ctx: RunContext[None] = RunContext(deps=None, model=model, usage=RunUsage(), prompt="go")
    request = ModelRequestContext(
        model=model,
        messages=[],
        model_settings=None,
        model_request_parameters=ModelRequestParameters(),
    )
    calls = [
        ModelResponse(parts=[ToolCallPart("lookup", {"step": i}, tool_call_id=f"c{i}")])
        for i in range(TURNS)
    ]
    answer = ModelResponse(parts=[TextPart("done")])
    tool_def = ToolDefinition(name="lookup")

    async def run() -> None:
        observed: Any = await capability.for_run(ctx)

        async def body() -> Any:
            for i in range(TURNS):

                async def respond(_: Any, i: int = i) -> Any:
                    return calls[i]

                async def execute(args: Any, i: int = i) -> Any:
                    return f"step {i}"

                response = await observed.wrap_model_request(
                    ctx, request_context=request, handler=respond
                )
                await observed.wrap_tool_execute(
                    ctx,
                    call=response.parts[0],
                    tool_def=tool_def,
                    args={"step": i},
                    handler=execute,
                )

            async def final(_: Any) -> Any:
                return answer

            await observed.wrap_model_request(ctx, request_context=request, handler=final)
            return _Result()

        await observed.wrap_run(ctx, handler=body)

    return run


class _Result:
    """What ``wrap_run`` reads of a result: its output."""

    output = "done"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Time every variant of both frameworks; print a table; return its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 30")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 30
    rows: list[dict[str, Any]] = []
    for framework, build in (
        ("openai-agents", _agents_variants),
        ("pydantic-ai", _pydantic_ai_variants),
    ):
        times = asyncio.run(_measure(build(), rounds))
        bare_best, bare_median = min(times["bare"]), statistics.median(times["bare"])
        for name, samples in times.items():
            best, median = min(samples), statistics.median(samples)
            rows.append(
                {
                    "framework": framework,
                    "name": name,
                    "best_ns": best,
                    "median_ns": median,
                    "best_ratio": best / bare_best,
                    "median_ratio": median / bare_median,
                }
            )
    print_table(
        [
            "framework",
            f"run ({TURNS} tool turns + answer), CPU",
            "best",
            "median",
            "best vs bare",
            "median vs bare",
        ],
        [
            [
                r["framework"],
                r["name"],
                fmt_ns(r["best_ns"]),
                fmt_ns(r["median_ns"]),
                f"{r['best_ratio']:.2f}×",
                f"{r['median_ratio']:.2f}×",
            ]
            for r in rows
        ],
    )
    print()
    alone: list[dict[str, Any]] = []
    hooks_only: tuple[tuple[str, Callable[[], Variant]], ...] = (
        ("openai-agents", _agents_hooks_only),
        ("pydantic-ai", _pydantic_ai_hooks_only),
    )
    for framework, make in hooks_only:
        samples = asyncio.run(_measure({"hooks": make()}, rounds * 10))["hooks"]
        bare = next(r for r in rows if r["framework"] == framework and r["name"] == "bare")
        alone.append(
            {
                "framework": framework,
                "name": "adapter hooks alone",
                "best_ns": min(samples),
                "median_ns": statistics.median(samples),
                "share_of_bare": min(samples) / bare["best_ns"],
            }
        )
    print_table(
        [
            "framework",
            "the same run's hooks, no framework, CPU",
            "best",
            "median",
            "best vs bare run's best",
        ],
        [
            [
                r["framework"],
                r["name"],
                fmt_ns(r["best_ns"]),
                fmt_ns(r["median_ns"]),
                f"{100 * r['share_of_bare']:.1f} %",
            ]
            for r in alone
        ],
    )
    return rows + alone


if __name__ == "__main__":
    main()
