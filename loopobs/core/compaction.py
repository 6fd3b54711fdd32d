"""Context-window estimates, compactors, and the compaction step before a model call.

Before each model call the loop estimates the request size
(:func:`estimate_request`). It prefers the input-token count the provider
reported for the previous call plus a character heuristic for the messages
added since, and falls back to the heuristic alone (about four characters a
token). :func:`compact_if_needed` then compacts the session when the estimate
reaches the loop's threshold or a detector asked for it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from loopobs.core.errors import ContextExceeded
from loopobs.core.events import CompactionContext
from loopobs.core.model import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

if TYPE_CHECKING:
    from loopobs.core.run import Session
    from loopobs.core.runtime import RunDeps

__all__ = [
    "Compactor",
    "TruncatingCompactor",
    "compact_if_needed",
    "estimate_request",
    "estimate_tokens",
]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def _message_chars(message: Message) -> int:
    if isinstance(message, AssistantMessage):
        size = len(message.content) + len(message.thinking or "")
        for call in message.tool_calls:
            size += len(call.name) + len(json.dumps(dict(call.arguments), default=str))
        return size
    return len(message.content)


def estimate_tokens(
    messages: Sequence[Message], tools: Sequence[ToolDefinition] = ()
) -> int:
    """A character-based estimate of the tokens ``messages`` (and tool schemas) take."""
    chars = sum(_message_chars(m) for m in messages)
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(dict(t.parameters)))
                 for t in tools)
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


def estimate_request(session: Session, tools: Sequence[ToolDefinition] = ()) -> int:
    """The estimated input tokens of the session's next request.

    The provider's count for the last call plus the heuristic for the messages
    added since; the heuristic over everything (tool schemas included) before
    the first count.
    """
    if session.last_input_tokens is not None:
        new = session.messages[session.messages_at_last_usage:]
        return session.last_input_tokens + estimate_tokens(new)
    return estimate_tokens(session.messages, tools)


def compact_if_needed(deps: RunDeps, run_id: uuid.UUID, session: Session) -> None:
    """Compact ``session`` before a model call if its estimate reaches the threshold.

    Also compacts (to half its size) when a detector asked for it. Emits
    ``on_compaction`` when messages were removed.

    Raises:
        ContextExceeded: the conversation still fills the whole window.
    """
    settings = deps.settings
    window = settings.context_window
    forced = session.compact_requested
    session.compact_requested = False
    if window is None and not forced:
        return
    before = estimate_request(session, deps.tool_definitions)
    threshold = int(window * settings.compaction_threshold) if window is not None else None
    reason: Literal["threshold", "detector"]
    if threshold is not None and before >= threshold:
        reason = "threshold"
        target = max(1, threshold * 3 // 4)
    elif forced:
        reason = "detector"
        target = max(1, before // 2)
    else:
        return
    old = session.messages
    # ``before`` may be the provider's count; compactors measure with the character
    # heuristic. Give the compactor its target in its own units, and report the size
    # after in the provider's (else a heuristic that undercounts never compacts).
    measured = estimate_tokens(old)
    scale = before / measured if measured > 0 else 1.0
    compacted = list(deps.compactor.compact(list(old), max(1, int(target / scale))))
    removed = len(old) - len(compacted)
    if removed > 0:
        session.messages = compacted
        session.last_input_tokens = None
        after = round(estimate_tokens(compacted) * scale)
        em = deps.emit
        if em.listens("on_compaction"):
            em.on_compaction(CompactionContext(
                run_id=run_id, time_ns=time.time_ns(), tokens_before=before,
                tokens_after=after, tokens_saved=max(0, before - after),
                messages_removed=removed, reason=reason,
            ))
    else:
        after = before
    if window is not None and after >= window:
        raise ContextExceeded(used=after, limit=window)
