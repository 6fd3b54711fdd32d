"""Content capture: the mode switch, and message JSON in the GenAI conventions' schema.

Message content (prompts, answers, tool arguments and results) stays out of
telemetry unless the user opts in, with the ``capture_content`` argument of
``TracingObserver`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``:

``NO_CONTENT`` (default)
    nothing;
``SPAN_ONLY``
    JSON strings on the ``chat`` / ``execute_tool`` spans;
``EVENT_ONLY``
    the same attributes on a ``gen_ai.client.inference.operation.details``
    span event of the ``chat`` span (tool content stays on the tool span);
``SPAN_AND_EVENT``
    both.

Messages follow the v1.41 schema (``gen-ai-input-messages.json`` /
``gen-ai-output-messages.json``): ``{"role", "parts": [...]}`` with ``text``,
``reasoning``, ``tool_call`` and ``tool_call_response`` parts; output messages
add ``finish_reason``.

Sizes: each captured value (an attribute's JSON string, each string of a
log record's structured content) is cut to :data:`DEFAULT_MAX_CONTENT_LENGTH`
characters by default, or to ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` /
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` when lower (:func:`attribute_length_limit`),
ending in :data:`TRUNCATED_MARKER`: an 11 MB tool result must not become an
11 MB attribute that makes a collector drop the whole batch.
"""

from __future__ import annotations

import enum
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "DEFAULT_MAX_CONTENT_LENGTH",
    "LENGTH_LIMIT_ENVS",
    "TRUNCATED_MARKER",
    "ContentMode",
    "assistant_message",
    "attribute_length_limit",
    "cut",
    "cut_strings",
    "dumps",
    "finish_reason",
    "output_message",
    "parse_content_mode",
    "system_instructions",
    "text_part",
    "tool_call_part",
    "tool_message",
    "user_message",
]

logger = logging.getLogger("loopobs.exporters.content")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

DEFAULT_MAX_CONTENT_LENGTH = 32_768
"""Characters one captured content value may have by default (``TracingObserver``'s
``max_content_length``)."""
TRUNCATED_MARKER = "…[truncated]"
"""The end of a value that was cut."""
LENGTH_LIMIT_ENVS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
"""The standard variables bounding an attribute value's length, the span one first (as the
OpenTelemetry SDK reads them)."""


class ContentMode(enum.Enum):
    """Where message content goes; :attr:`NO_CONTENT` keeps it out of telemetry."""

    NO_CONTENT = "NO_CONTENT"
    SPAN_ONLY = "SPAN_ONLY"
    EVENT_ONLY = "EVENT_ONLY"
    SPAN_AND_EVENT = "SPAN_AND_EVENT"

    @property
    def on_span(self) -> bool:
        """Whether content goes on span attributes."""
        return self in (ContentMode.SPAN_ONLY, ContentMode.SPAN_AND_EVENT)

    @property
    def on_event(self) -> bool:
        """Whether content goes on the inference-details span event."""
        return self in (ContentMode.EVENT_ONLY, ContentMode.SPAN_AND_EVENT)

    @property
    def enabled(self) -> bool:
        """Whether any content is captured."""
        return self is not ContentMode.NO_CONTENT


def parse_content_mode(
    value: ContentMode | bool | str | None, environ: Mapping[str, str] | None = None
) -> ContentMode:
    """The content mode for an argument, falling back to the environment variable.

    ``None`` reads :data:`CAPTURE_CONTENT_ENV`; ``True`` means ``SPAN_ONLY`` and
    ``False`` ``NO_CONTENT``; strings are case-insensitive (``"true"`` is the
    legacy spelling of ``SPAN_ONLY``). An unknown string logs a warning and
    gives ``NO_CONTENT``.
    """
    if isinstance(value, ContentMode):
        return value
    if isinstance(value, bool):
        return ContentMode.SPAN_ONLY if value else ContentMode.NO_CONTENT
    source = "capture_content"
    if value is None:
        env = os.environ if environ is None else environ
        value = env.get(CAPTURE_CONTENT_ENV, "")
        source = CAPTURE_CONTENT_ENV
    text = value.strip().upper()
    if not text or text in ("FALSE", "NONE"):
        return ContentMode.NO_CONTENT
    if text == "TRUE":
        return ContentMode.SPAN_ONLY
    try:
        return ContentMode(text)
    except ValueError:
        logger.warning(
            "%s=%r is not one of NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT; "
            "capturing no content",
            source,
            value,
        )
        return ContentMode.NO_CONTENT


def attribute_length_limit(environ: Mapping[str, str] | None = None) -> int | None:
    """The attribute value length limit the environment sets, or None.

    The first of :data:`LENGTH_LIMIT_ENVS` that is set wins; a value that is not
    a non-negative integer is ignored (logged).
    """
    env = os.environ if environ is None else environ
    for name in LENGTH_LIMIT_ENVS:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        try:
            limit = int(raw)
        except ValueError:
            limit = -1
        if limit >= 0:
            return limit
        logger.warning("%s=%r is not a non-negative integer; ignored", name, raw)
    return None


def cut(text: str, limit: int | None) -> str | None:
    """``text`` cut to ``limit`` characters, ending in :data:`TRUNCATED_MARKER`; None if it fits."""
    if limit is None or len(text) <= limit:
        return None
    if limit <= len(TRUNCATED_MARKER):
        return text[:limit]
    return text[: limit - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER


def cut_strings(value: Any, limit: int | None) -> tuple[Any, int]:
    """``value`` with every string in it (in dicts, lists, tuples) :func:`cut`; how many were."""
    if limit is None:
        return value, 0
    if isinstance(value, str):
        short = cut(value, limit)
        return (value, 0) if short is None else (short, 1)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        total = 0
        for key, item in value.items():
            out[key], count = cut_strings(item, limit)
            total += count
        return (out, total) if total else (value, 0)
    if isinstance(value, list | tuple):
        items = []
        total = 0
        for item in value:
            short_item, count = cut_strings(item, limit)
            items.append(short_item)
            total += count
        return (items, total) if total else (value, 0)
    return value, 0


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept, unknown objects as their ``str``."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def text_part(text: str) -> dict[str, Any]:
    """A ``text`` part."""
    return {"type": "text", "content": text}


def tool_call_part(call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tool_call`` request part."""
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": dict(arguments)}


def user_message(text: str) -> dict[str, Any]:
    """A user message with one text part."""
    return {"role": "user", "parts": [text_part(text)]}


def assistant_message(
    text: str, tool_calls: Sequence[dict[str, Any]] = (), reasoning: str = ""
) -> dict[str, Any]:
    """An assistant message: optional reasoning, text, then tool-call parts."""
    parts: list[dict[str, Any]] = []
    if reasoning:
        parts.append({"type": "reasoning", "content": reasoning})
    if text:
        parts.append(text_part(text))
    parts.extend(tool_calls)
    return {"role": "assistant", "parts": parts}


def tool_message(call_id: str, response: str) -> dict[str, Any]:
    """A tool message answering ``call_id``."""
    return {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": response}],
    }


_FINISH_REASONS: Mapping[str, str] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "tool_call": "tool_call",
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "error": "error",
}


def finish_reason(reason: str | None, *, has_tool_calls: bool = False) -> str:
    """The schema's finish reason for a provider's (``tool_use`` → ``tool_call``).

    A missing reason becomes ``tool_call`` when the message asks for tools,
    else ``stop``; an unknown one is kept as is.
    """
    if not reason:
        return "tool_call" if has_tool_calls else "stop"
    return _FINISH_REASONS.get(reason.lower(), reason)


def output_message(
    text: str,
    tool_calls: Sequence[dict[str, Any]],
    reason: str | None,
    reasoning: str = "",
) -> dict[str, Any]:
    """The ``gen_ai.output.messages`` entry of one completed choice."""
    message = assistant_message(text, tool_calls, reasoning)
    message["finish_reason"] = finish_reason(reason, has_tool_calls=bool(tool_calls))
    return message


def system_instructions(text: str) -> list[dict[str, Any]]:
    """``gen_ai.system_instructions``: a list with one text part."""
    return [text_part(text)]
