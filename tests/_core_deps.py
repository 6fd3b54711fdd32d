"""RunDeps for driving one phase of a run directly, without AgentLoop."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loopobs import LlmClient, LoopObserver, ObserverSet, Tool, TruncatingCompactor, tool
from loopobs.contract.trace_links import TraceLinks
from loopobs.llm import ScriptedClient
from loopobs.loop.policy import RunPolicy
from loopobs.loop.runtime import LoopSettings, RunDeps
from loopobs.loop.workers import ToolWorkers


def make_deps(
    client: LlmClient | None = None,
    *,
    tools: Iterable[Any] = (),
    observers: Iterable[LoopObserver] = (),
    model: str = "m1",
    links: TraceLinks | None = None,
    **settings: Any,
) -> RunDeps:
    """Dependencies as AgentLoop builds them, with its defaults unless ``settings`` say else."""
    policy = RunPolicy()
    emit = ObserverSet([*observers, policy])
    defaults: dict[str, Any] = {
        "max_turns": 50,
        "tool_timeout": 30.0,
        "parallel_tool_calls": True,
        "context_window": None,
        "compaction_threshold": 0.8,
        "fallback_models": (),
        "agent_name": "agent",
        "system_prompt": None,
        "request_options": {},
    }
    defaults.update(settings)
    made = [t if isinstance(t, Tool) else tool(t) for t in tools]
    return RunDeps(
        client=client if client is not None else ScriptedClient([]),
        tools={t.name: t for t in made},
        observers=emit,
        policy=policy,
        compactor=TruncatingCompactor(),
        links=links if links is not None else TraceLinks(),
        workers=ToolWorkers(),
        settings=LoopSettings(**defaults),
        model=lambda: model,
    )
