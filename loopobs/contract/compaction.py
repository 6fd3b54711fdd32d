"""Context-window estimates and compactors: how a conversation is measured and shrunk.

:func:`estimate_tokens` is the character heuristic (about four characters a
token); a :class:`Compactor` shrinks a conversation to a token target, and
:class:`TruncatingCompactor` is the default one. The loop's compaction step
(:mod:`loopobs.loop.compaction`) decides when to call it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from loopobs.contract.model import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["CHARS_PER_TOKEN", "Compactor", "TruncatingCompactor", "estimate_tokens"]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def _message_chars(message: Message) -> int:
    if isinstance(message, AssistantMessage):
        size = len(message.content) + len(message.thinking or "")
        for call in message.tool_calls:
            size += len(call.name) + len(json.dumps(dict(call.arguments), default=str))
        return size
    return len(message.content)


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolDefinition] = ()) -> int:
    """A character-based estimate of the tokens ``messages`` (and tool schemas) take."""
    chars = sum(_message_chars(m) for m in messages)
    chars += sum(
        len(t.name) + len(t.description) + len(json.dumps(dict(t.parameters))) for t in tools
    )
    return chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS * len(messages)


class Compactor(Protocol):
    """Shrinks a conversation to fit ``target_tokens`` (as :func:`estimate_tokens` counts)."""

    def compact(self, messages: Sequence[Message], target_tokens: int) -> list[Message]:
        """Return the compacted conversation (may return it unchanged if nothing can go)."""
        ...


class TruncatingCompactor:
    """Keeps the system prompt, the first user message and the most recent messages.

    Drops the oldest messages in between until the estimate fits, keeping at
    least ``preserve_recent`` recent messages, and never separates an assistant
    message that calls tools from the results of those calls.
    """

    def __init__(self, preserve_recent: int = 4) -> None:
        self.preserve_recent = preserve_recent

    def compact(self, messages: Sequence[Message], target_tokens: int) -> list[Message]:
        """Drop middle messages, oldest first, until the estimate is at most ``target_tokens``."""
        head: list[Message] = []
        rest = list(messages)
        while rest and isinstance(rest[0], SystemMessage):
            head.append(rest.pop(0))
        if rest and isinstance(rest[0], UserMessage):
            head.append(rest.pop(0))
        # The tail may only start where a tool exchange does not get split.
        cut_points = [i for i in range(len(rest)) if not isinstance(rest[i], ToolResultMessage)]
        best = rest
        for start in cut_points:
            if len(rest) - start < self.preserve_recent and start > 0:
                break
            candidate = rest[start:]
            best = candidate
            if estimate_tokens(head + candidate) <= target_tokens:
                break
        return head + best
