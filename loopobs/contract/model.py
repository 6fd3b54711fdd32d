"""What the loop says to a model and hears back: messages, requests, stream events, ``LlmClient``.

A backend implements :class:`LlmClient`: a ``provider`` name and one async
streaming call. The loop drives the iterator to its end (or closes it on
cancellation) and turns the stream events into observer events. Backends
report failures as :class:`~loopobs.contract.errors.LoopError` (usually a
:class:`~loopobs.contract.errors.ModelError` whose ``retryable`` tells the loop
whether falling back to another model may help).

Messages are frozen dataclasses with a ``role`` discriminator, so a whole
conversation serialises to JSON (for checkpoints) and back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from loopobs.contract.events import Usage

__all__ = [
    "AssistantMessage",
    "Finish",
    "LlmClient",
    "Message",
    "ModelRequest",
    "StreamEvent",
    "SystemMessage",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingBlockReady",
    "ThinkingDelta",
    "ToolCallPart",
    "ToolCallReady",
    "ToolDefinition",
    "ToolResultMessage",
    "UsageReport",
    "UserMessage",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart:
    """One tool call the model asked for: complete, with its id, name and parsed arguments."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    """Set (and ``arguments`` empty) when the model's argument text was not a JSON
    object: the loop answers the call with an ``InvalidToolInput`` error result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingBlock:
    """A provider's reasoning block, kept to send back verbatim with the conversation.

    Anthropic requires the signed thinking of the assistant turn that tool
    results answer; ``signature`` is that signature, ``redacted`` the opaque
    data of a redacted block. Other providers neither send nor need them.
    """

    thinking: str = ""
    signature: str | None = None
    redacted: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessage:
    """The system prompt."""

    content: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    """A message from the user (or a note the loop adds on the user's side)."""

    content: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    """A model response: visible text, optional reasoning, and the tool calls it asks for."""

    content: str = ""
    tool_calls: tuple[ToolCallPart, ...] = ()
    thinking: str | None = None
    thinking_blocks: tuple[ThinkingBlock, ...] = ()
    """Reasoning blocks to replay to the provider (see :class:`ThinkingBlock`)."""
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultMessage:
    """The result of one tool call, fed back to the model."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDefinition:
    """A tool as the model sees it: name, description and JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call: the model to use, the conversation so far, and the tools on offer."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific extras (``max_tokens``, ``temperature``, …), passed through."""


# -- stream events ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A chunk of visible text."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A chunk of reasoning; ``""`` marks reasoning the provider redacted."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """A tool call, complete (its argument fragments already assembled)."""

    call: ToolCallPart


@dataclass(frozen=True, slots=True)
class ThinkingBlockReady:
    """A complete reasoning block (signed or redacted) to keep with the assistant message."""

    block: ThinkingBlock


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Token usage for the call; a later report replaces an earlier one."""

    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """The stream's final event: why the model stopped, and what answered."""

    reason: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    service_tier: str | None = None
    """The service tier that served the call, when the provider says (OpenAI)."""
    system_fingerprint: str | None = None
    """The backend configuration's fingerprint, when the provider says (OpenAI)."""


StreamEvent = TextDelta | ThinkingDelta | ThinkingBlockReady | ToolCallReady | UsageReport | Finish


@runtime_checkable
class LlmClient(Protocol):
    """A model backend.

    A client that calls a server may also have ``server_address`` (the host)
    and ``server_port`` attributes; the loop reports them on its events. A
    client that adds options of its own to every request (Anthropic's
    ``max_tokens``) lists them in a ``default_options`` mapping, so the loop
    reports the options really sent (the request's own win).

    ``stream(request)`` returns an async iterator of :data:`StreamEvent`. It
    ends after a :class:`Finish`; a stream that ends without one is broken.
    If the iterator has ``aclose()``, the loop calls it when it stops early
    (cancellation), so the backend can release its connection.
    """

    provider: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Start one model call and stream its events."""
        ...
