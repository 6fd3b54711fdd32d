"""The compaction step before a model call.

Before each model call the loop estimates the request size
(:func:`estimate_request`). It prefers the input-token count the provider
reported for the previous call plus a character heuristic for the messages
added since, and falls back to the heuristic alone
(:func:`~loopobs.contract.compaction.estimate_tokens`). :func:`compact_if_needed`
then compacts the session when the estimate reaches the loop's threshold or a
detector asked for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from loopobs.contract.compaction import estimate_tokens
from loopobs.contract.errors import ContextExceeded
from loopobs.contract.events import CompactionContext
from loopobs.contract.model import ToolDefinition

if TYPE_CHECKING:
    from loopobs.loop.run import Conversation
    from loopobs.loop.runtime import RunDeps

__all__ = ["compact_if_needed", "estimate_request"]


def estimate_request(session: Conversation, tools: Sequence[ToolDefinition] = ()) -> int:
    """The estimated input tokens of the session's next request.

    The provider's count for the last call plus the heuristic for the messages
    added since; the heuristic over everything (tool schemas included) before
    the first count.
    """
    if session.last_input_tokens is not None:
        new = session.messages[session.messages_at_last_usage :]
        return session.last_input_tokens + estimate_tokens(new)
    return estimate_tokens(session.messages, tools)


def compact_if_needed(deps: RunDeps, run_id: uuid.UUID, session: Conversation) -> None:
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
        em = deps.observers
        if em.listens("on_compaction"):
            em.on_compaction(
                CompactionContext(
                    run_id=run_id,
                    time_ns=time.time_ns(),
                    tokens_before=before,
                    tokens_after=after,
                    tokens_saved=max(0, before - after),
                    messages_removed=removed,
                    reason=reason,
                )
            )
    else:
        after = before
    if window is not None and after >= window:
        raise ContextExceeded(used=after, limit=window)
