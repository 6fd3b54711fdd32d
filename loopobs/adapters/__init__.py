"""Adapters: the loops people already run, reported through the same event contract.

One module per framework, each behind an optional extra; importing one without
its framework raises an ``ImportError`` whose message is the install command:

- ``loopobs.adapters.langchain``: a LangChain / LangGraph callback handler (``loopobs[langchain]``);
- ``loopobs.adapters.otel``: an OpenTelemetry ``SpanProcessor`` that reads GenAI and
  OpenInference spans from any instrumented app (``loopobs[otel-adapter]``);
- ``loopobs.adapters.openai_agents`` and ``loopobs.adapters.pydantic_ai``.

Every adapter feeds a :class:`RunTracker` (observers, detectors, stop policy) and
reports each framework run through an :class:`AdapterRun`, which keeps the
contract's guarantees (``loopobs.adapters._run`` explains how to build an adapter
on it). When a detector decides ``stop``, the adapter raises :class:`RunStopped`
(a :class:`~loopobs.contract.errors.LoopDetected`) into the framework, which ends the
run and reaches the caller; ``warn`` leaves the run alone.

This package imports no framework: only the adapter modules do.
"""

from __future__ import annotations

from loopobs.adapters._extras import missing_extra
from loopobs.adapters._run import (
    AdapterRun,
    RunStopped,
    RunTracker,
    StopPolicy,
    ToolCall,
    model_error,
    shielded,
    token_count,
    tool_error,
)

__all__ = [
    "AdapterRun",
    "RunStopped",
    "RunTracker",
    "StopPolicy",
    "ToolCall",
    "missing_extra",
    "model_error",
    "shielded",
    "token_count",
    "tool_error",
]
