"""A deterministic offline model for demos and tests.

``ScriptedClient(steps)`` answers each model call with the next step, whatever
model is asked: :class:`Reply` streams its thinking and text in chunks and then
its tool calls; :class:`Fail` fails the call with a given ``LoopError``.
``steps`` may also be a function of the request, for scripts that must not
depend on the order in which concurrent runs call the model.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loopobs.contract.errors import LoopError, ModelError
from loopobs.contract.events import Usage
from loopobs.contract.model import (
    Finish,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    UsageReport,
)

__all__ = ["Fail", "Reply", "ScriptedClient", "Step", "ToolCall"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call in a scripted reply. ``arguments`` may be raw text (to script bad JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A scripted model response, streamed as ``thinking`` then ``text`` deltas, then tool calls.

    ``thinking=""`` streams one empty thinking delta (redacted reasoning).
    ``usage`` is reported as given; ``None`` reports no usage.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    """A scripted failure of the model call with ``error``."""

    error: LoopError


Step = Reply | Fail


class ScriptedClient:
    """An :class:`~loopobs.contract.model.LlmClient` that plays a script.

    Args:
        steps: the replies and failures, consumed one per call in order; or a
            function ``request -> step``.
        chunk_size: characters per streamed delta.
        latency_s: delay before the first chunk of every call.

    ``requests`` records every request received, for assertions. Running out of
    steps fails the call with a non-retryable ``ModelError`` that says so.
    """

    provider = "scripted"

    def __init__(
        self,
        steps: Iterable[Step] | Callable[[ModelRequest], Step],
        *,
        chunk_size: int = 8,
        latency_s: float = 0.0,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._script: Callable[[ModelRequest], Step] | None
        if callable(steps):
            self._script = steps
            self._steps: list[Step] = []
        else:
            self._script = None
            self._steps = list(steps)
        self._next = 0
        self.chunk_size = chunk_size
        self.latency_s = latency_s
        self.requests: list[ModelRequest] = []
        self._ids = itertools.count(1)

    @property
    def remaining(self) -> int:
        """Steps not yet played (0 for a function script)."""
        return len(self._steps) - self._next

    def _take(self, request: ModelRequest) -> Step:
        if self._script is not None:
            return self._script(request)
        if self._next >= len(self._steps):
            raise ModelError(
                f"ScriptedClient has no steps left ({len(self._steps)} played); "
                "add a Reply for this call",
                retryable=False,
                provider=self.provider,
            )
        step = self._steps[self._next]
        self._next += 1
        return step

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the next step for ``request``."""
        self.requests.append(request)
        return self._play(request)

    async def _play(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        step = self._take(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if isinstance(step, Fail):
            raise step.error
        size = self.chunk_size
        if step.thinking is not None:
            if step.thinking == "":
                yield ThinkingDelta("")
            for i in range(0, len(step.thinking), size):
                yield ThinkingDelta(step.thinking[i : i + size])
        for i in range(0, len(step.text), size):
            yield TextDelta(step.text[i : i + size])
        for call in step.tool_calls:
            yield ToolCallReady(self._part(call))
        if step.usage is not None:
            yield UsageReport(step.usage)
        reason = step.finish_reason or ("tool_calls" if step.tool_calls else "stop")
        yield Finish(
            reason=reason, response_id=f"scripted-{next(self._ids)}", response_model=request.model
        )

    def _part(self, call: ToolCall) -> ToolCallPart:
        call_id = call.id or f"call_{next(self._ids)}"
        if isinstance(call.arguments, str):
            try:
                parsed = json.loads(call.arguments)
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                return ToolCallPart(id=call_id, name=call.name, raw_arguments=call.arguments)
            return ToolCallPart(id=call_id, name=call.name, arguments=parsed)
        return ToolCallPart(id=call_id, name=call.name, arguments=dict(call.arguments))
