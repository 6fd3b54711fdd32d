"""Adapters: the loops people already run, reported through the same event contract.

One module per framework, each behind an optional extra; importing one without
its framework raises an ``ImportError`` whose message is the install command:

- ``loopobs.adapters.langchain``: a LangChain / LangGraph callback handler (``loopobs[langchain]``);
- ``loopobs.adapters.otel``: an OpenTelemetry ``SpanProcessor`` that reads GenAI and
  OpenInference spans from any instrumented app (``loopobs[otel-adapter]``);
- ``loopobs.adapters.openai_agents`` and ``loopobs.adapters.pydantic_ai``;
- ``loopobs.adapters.adk``: a Google ADK plugin (``loopobs[adk]``);
- ``loopobs.adapters.strands``: Strands Agents hooks (``loopobs[strands]``);
- ``loopobs.adapters.maf``: Microsoft Agent Framework middleware (``loopobs[agent-framework]``);
- ``loopobs.adapters.langchain_middleware``: a LangChain 1.x ``create_agent`` middleware
  (``loopobs[langchain-agents]``);
- ``loopobs.adapters.crewai``: a CrewAI ``before_llm_call`` hook that ends a run the span
  bridge's policy stopped (``loopobs[crewai]``);
- ``loopobs.adapters.ag2``: an AG2 middleware that does the same for AG2 (``loopobs[ag2]``);
- ``loopobs.adapters.smolagents``: a smolagents step callback that interrupts a stopped run
  (``loopobs[smolagents]``).

Every adapter feeds a :class:`RunTracker` (observers, detectors, stop policy) and
reports each framework run through an :class:`AdapterRun`, which keeps the
contract's guarantees (``loopobs.adapters._run`` explains how to build an adapter
on it). When a detector decides ``stop``, the adapter raises :class:`RunStopped`
(a :class:`~loopobs.contract.errors.LoopDetected`) into the framework, which ends the
run and reaches the caller; ``warn`` leaves the run alone.

This package imports no framework: only the adapter modules do.
"""

from __future__ import annotations

import warnings
from typing import Any

from loopobs.adapters._extras import missing_extra
from loopobs.adapters._run import (
    AdapterRun,
    FrameworkToolCall,
    RunStopped,
    RunTracker,
    StopPolicy,
    model_error,
    shielded,
    token_count,
    tool_error,
)

__all__ = [
    "AdapterRun",
    "FrameworkToolCall",
    "RunStopped",
    "RunTracker",
    "StopPolicy",
    "missing_extra",
    "model_error",
    "shielded",
    "token_count",
    "tool_error",
]


def __getattr__(name: str) -> Any:
    if name == "ToolCall":
        # The adapters' ToolCall shared its name with loopobs.llm.ToolCall (a scripted
        # model's call); it is FrameworkToolCall now.
        warnings.warn(
            "loopobs.adapters.ToolCall was renamed FrameworkToolCall "
            "(loopobs.llm.ToolCall is the scripted model's); the old name goes away "
            "in loopobs 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return FrameworkToolCall
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
