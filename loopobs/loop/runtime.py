"""What a run works with: the dependencies ``AgentLoop`` hands each run, and the clock.

A run reads nothing from the loop object itself: ``AgentLoop`` builds one
:class:`RunDeps` when a run starts, and the run's phases (model call, tool
phase, compaction, parking, policy) receive it. Settings are a snapshot for the
run; the model is read before every call, so ``switch_model`` takes effect at
the next call of a run in progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loopobs.contract.compaction import Compactor
from loopobs.contract.model import LlmClient, ToolDefinition
from loopobs.contract.observer import ObserverSet
from loopobs.contract.tools import Tool
from loopobs.contract.trace_links import TraceLinks
from loopobs.cost.budget import Budget
from loopobs.cost.pricing import PriceLookup, default_prices
from loopobs.cost.shared import SharedBudget
from loopobs.loop.context_providers import ProviderSpec
from loopobs.loop.policy import RunPolicy
from loopobs.loop.workers import ToolWorkers

__all__ = ["LoopSettings", "RunDeps", "now_ns", "perf"]

now_ns = time.time_ns
"""Wall clock of events (``time_ns`` of every context)."""
perf = time.perf_counter
"""Monotonic clock of durations."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    """The loop's limits and switches, fixed for the length of one run."""

    max_turns: int
    tool_timeout: float | None
    parallel_tool_calls: bool
    context_window: int | None
    compaction_threshold: float
    fallback_models: tuple[str, ...]
    agent_name: str
    system_prompt: str | None
    request_options: Mapping[str, Any] = field(default_factory=dict)
    """Sent with every model request (``ModelRequest.options``)."""
    context_provider_timeout: float | None = 5.0
    budget: Budget | None = None
    """Limits for each run (a session's own budget is on the session)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDeps:
    """Everything a run and its phases use: no phase reaches back into ``AgentLoop``."""

    client: LlmClient
    tools: Mapping[str, Tool]
    observers: ObserverSet
    """Where events go: the user's observers, then the detectors, then :attr:`policy`."""
    policy: RunPolicy
    compactor: Compactor
    links: TraceLinks
    workers: ToolWorkers
    """Threads for sync tools, the loop's own."""
    settings: LoopSettings
    model: Callable[[], str]
    """The model for the next call."""
    providers: tuple[ProviderSpec, ...] = ()
    """Context providers, run before each model call."""
    prices: PriceLookup = field(default_factory=default_prices)
    """How model calls are priced (default: ``genai-prices``)."""
    shared_budget: SharedBudget | None = None
    """Limits shared with other processes (reserved before each call); None: none."""

    @property
    def tool_definitions(self) -> tuple[ToolDefinition, ...]:
        """The tools as the model sees them, in registration order."""
        return tuple(t.definition for t in self.tools.values())
