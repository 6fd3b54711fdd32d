"""Shared fixtures: one fully populated sample context per hook."""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import importlib
import pkgutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import loopobs
from loopobs import (
    CONTEXT_TYPES,
    DisplayHint,
    HookName,
    McpCallInfo,
    ModelError,
    NotYetAwake,
    ProviderFailed,
    RateLimited,
    RunStatus,
    ToolExecutionError,
    Usage,
)
from loopobs.contract.events import ToolAnnotations
from loopobs.loop.parking import CLAIMS


def _modules(path: Path, prefix: str) -> Iterator[str]:
    """The names of the modules under the package at ``path``, without importing them."""
    for info in pkgutil.iter_modules([str(path)], prefix):
        yield info.name
        if info.ispkg:
            yield from _modules(path / info.name.rsplit(".", 1)[-1], info.name + ".")


# Left out: the deprecated paths; the demo and the framework adapters, which import
# frameworks (the Agents SDK alone takes over a second) and are imported where their tests
# are collected; but not the adapters' framework-free modules.
_LEFT_OUT = ("loopobs.core.", "loopobs.adapters.", "loopobs.demo.")
_FRAMEWORK_FREE_ADAPTERS = (
    "loopobs.adapters._",
    "loopobs.adapters.otel",
)


def _import_the_package_with_the_collector_held_off() -> None:
    """Import every module of ``loopobs`` now, with the garbage collector held off.

    pytest rewrites the asserts of every module of a distribution whose plugin it loads
    from an entry point (``loopobs.pytest_plugin``), parsing each module on its first
    import. CPython 3.11.7's parser can fail there ("AST constructor recursion depth
    mismatch") when the collector runs finalizers mid-parse (see ``tests/_ast.py``), and a
    lazily imported module is parsed wherever a test first touches it. Here each is parsed
    once, before any test, with the collector off (but for ``_LEFT_OUT``, and modules whose
    dependency is not installed).
    """
    root = Path(loopobs.__file__).parent
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in _modules(root, "loopobs."):
            if name.startswith(_LEFT_OUT) and not name.startswith(_FRAMEWORK_FREE_ADAPTERS):
                continue
            with warnings.catch_warnings(), contextlib.suppress(ImportError):
                warnings.simplefilter("ignore")
                importlib.import_module(name)
    finally:
        if enabled:
            gc.enable()


_import_the_package_with_the_collector_held_off()

# No per-example deadline: the machine is shared, and a slow example is not a wrong one
# (speed is measured in bench/, as ratios).
settings.register_profile("loopobs", deadline=None)
settings.load_profile("loopobs")


@pytest.fixture(autouse=True)
def _fresh_resume_claims() -> Iterator[None]:
    """Each test starts with no checkpoint resumed in this process."""
    CLAIMS.reset()
    yield
    CLAIMS.reset()


RUN_ID = uuid.UUID("6f1c2b7e-0000-4000-8000-000000000001")
SESSION_ID = uuid.UUID("6f1c2b7e-0000-4000-8000-000000000002")

# Every field of every context set to a value different from its default, so a codec or a
# dispatcher that drops or mixes up a field shows up in an equality check.
SAMPLE_FIELDS: dict[str, dict[str, Any]] = {
    "on_run_start": {
        "session_id": SESSION_ID,
        "agent": "researcher",
        "model": "gpt-x",
        "resumed_from": uuid.UUID(int=7),
        "instructions": "You are terse.",
        "attribution": {"tenant": "acme", "user": "u-17"},
    },
    "on_run_end": {
        "success": False,
        "error": NotYetAwake(wake_at=dt.datetime(2030, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc)),
        "total_turns": 4,
        "duration_ms": 1234.5,
        "status": RunStatus.SLEEPING,
        "input_tokens": 900,
        "output_tokens": 80,
        "cost_usd": 0.0123,
    },
    "on_turn_start": {"turn": 3, "query": "what's the weather in Zürich? ☀️"},
    "on_turn_end": {
        "turn": 3,
        "success": False,
        "error": ModelError("boom", retryable=True, status_code=503, provider="openai"),
        "duration_ms": 12.25,
        "input_tokens": 300,
        "output_tokens": 20,
        "cost_usd": 0.00045,
    },
    "on_stream_start": {
        "turn": 3,
        "model": "m1",
        "provider": "anthropic",
        "attempt": 2,
        "request_options": {"max_tokens": 512, "temperature": 0.2},
        "server_address": "api.anthropic.com",
        "server_port": 443,
        "stream": True,
    },
    "on_stream_success": {
        "turn": 3,
        "model": "m1",
        "input_tokens": 300,
        "output_tokens": 20,
        "provider": "anthropic",
        "attempt": 2,
        "duration_ms": 801.5,
        "time_to_first_token_ms": 120.25,
        "finish_reason": "tool_calls",
        "response_id": "resp_1",
        "response_model": "m1-2025",
        "cache_read_input_tokens": 100,
        "cache_write_input_tokens": 50,
        "reasoning_output_tokens": 5,
        "usage_details": ("cache_read", "cache_write", "reasoning"),
        "server_address": "api.anthropic.com",
        "server_port": 443,
        "service_tier": "standard",
        "system_fingerprint": "fp_1",
        "cost_usd": 0.00031,
        "usage_reported": True,
        "stream": True,
    },
    "on_stream_failure": {
        "turn": 3,
        "model": "m1",
        "error": RateLimited(retry_after=2.5, provider="anthropic"),
        "provider": "anthropic",
        "attempt": 1,
        "duration_ms": 3.5,
        "server_address": "api.anthropic.com",
        "server_port": 443,
        "stream": False,
    },
    "on_response": {
        "turn": 3,
        "text": "Let me check.",
        "usage": Usage(input_tokens=300, output_tokens=20, cache_read_input_tokens=100),
        "tool_calls": 2,
    },
    "on_text_delta": {"turn": 3, "delta": "Let "},
    "on_thinking_delta": {"turn": 3, "delta": "hmm"},
    "on_tool_call_received": {
        "turn": 3,
        "tool": "weather",
        "tool_call_id": "call_1",
        "input": {"city": "Zürich", "days": [1, 2], "opts": {"units": None, "x": 1.5}},
        "annotations": ToolAnnotations(read_only=True, idempotent=True, side_effecting=False),
    },
    "on_tool_pre": {
        "turn": 3,
        "tool": "weather",
        "tool_call_id": "call_1",
        "attempt": 1,
        "tool_description": "The weather in a city.",
        "tool_type": "function",
    },
    "on_tool_post": {
        "tool_call_id": "call_1",
        "turn": 3,
        "tool": "weather",
        "result_hash": 2**64 - 1,
        "is_error": True,
        "duration_ms": 4.5,
        "display_hint": DisplayHint.code("python"),
        "attempt": 1,
        "outcome": "error",
        "error": ToolExecutionError("kaput", tool="weather", error_type="OSError"),
        "result": "kaput",
        "mcp": McpCallInfo(
            server="files",
            transport="tcp",
            protocol_version="2025-11-25",
            session_id="s-1",
            request_id="7",
            status_code="-32602",
            error_type="-32602",
            server_address="127.0.0.1",
            server_port=8080,
            duration_ms=4.25,
        ),
    },
    "on_compaction": {
        "tokens_before": 9000,
        "tokens_after": 4000,
        "tokens_saved": 5000,
        "messages_removed": 6,
        "reason": "manual",
    },
    "on_fallback": {"from_model": "m1", "to_model": "m2", "turn": 3},
    "on_model_switched": {"from_model": "m1", "to_model": "m2"},
    "on_loop_detected": {
        "pattern": "weather×3",
        "repetitions": 3,
        "tool": "weather",
        "action": "stop",
        "signal": "repeat",
        "reason": "weather(Zürich) returned the same result 3 times",
        "call_ids": ("call_1", "call_2", "call_3"),
        "normalised": ("path", "result:time"),
        "arguments_hash": 2**63,
        "raw_arguments_hash": 2**64 - 1,
        "result_hash": 7,
        "raw_result_hash": 8,
    },
    "on_convergence_detected": {
        "action": "compact",
        "similarity": 0.97,
        "consecutive": 3,
        "signal": "alternating",
        "reason": "3 answers in a row each repeat one of the last 4",
        "compared_with": 2,
    },
    "on_suspended": {
        "turn": 3,
        "tool": "approve",
        "tool_call_id": "call_2",
        "reason": "needs a human",
        "input_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        "kind": "signal",
    },
    "on_sleep": {
        "turn": 3,
        "tool": "wait",
        "tool_call_id": "call_3",
        "wake_at": dt.datetime(2030, 1, 2, 3, 4, 5, 678, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    },
    "on_context_provider": {
        "turn": 3,
        "provider": "memory",
        "outcome": "timeout",
        "duration_ms": 250.5,
        "chars": 0,
        "error": ProviderFailed("too slow", context_provider="memory", error_type="timeout"),
        "text": None,
    },
    "on_backpressure": {
        "queue": "inbox",
        "outcome": "dropped",
        "capacity": 4,
        "policy": "drop_oldest",
    },
    "on_session_reset": {"epoch": 2, "discarded": 3},
    "on_budget_exceeded": {
        "limit": "total_tokens",
        "value": 1250.0,
        "budget": 1000.0,
        "scope": "shared",
        "action": "warn",
        "scope_key": "tenant:acme",
    },
    "on_budget_unpriced": {
        "model": "my-model",
        "provider": "openai",
        "scope": "session",
        "budget": 0.01,
    },
    "on_shared_budget": {
        "operation": "commit",
        "outcome": "error",
        "store": "redis://127.0.0.1:6379/0",
        "duration_ms": 12.5,
        "reserved_usd": 0.45,
        "committed_usd": 0.0125,
        "expired": 2,
        "scope_key": "tenant:acme",
    },
}

MakeContext = Callable[..., Any]  # the context class follows from the hook name


def sample_context(
    hook: HookName, *, run_id: uuid.UUID = RUN_ID, time_ns: int = 1_700_000_000, **overrides: Any
) -> Any:
    """A context for ``hook`` with every field set (``overrides`` replace sample values).

    Typed ``Any``: the context class follows from ``hook``, which the type checker cannot see.
    """
    fields = {**SAMPLE_FIELDS[hook], **overrides}
    return CONTEXT_TYPES[hook](run_id=run_id, time_ns=time_ns, **fields)


@pytest.fixture
def make_context() -> MakeContext:
    """The :func:`sample_context` factory."""
    return sample_context
