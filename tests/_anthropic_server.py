"""A scripted Anthropic Messages API server on 127.0.0.1, for the ``anthropic`` SDK.

Each POST to ``/v1/messages`` takes the next scripted :class:`Message` and answers
with one JSON message, as the API does without streaming. Requests are kept in
:attr:`ScriptedMessages.requests`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests._model_server import Answer, ScriptedModelServer


@dataclass(frozen=True)
class Message:
    """One scripted message: text, tool uses ``(id, name, input)``, usage
    ``(input, output, cache_write, cache_read)`` as the API reports it (input without
    the cached tokens)."""

    text: str = ""
    calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    usage: tuple[int, int, int, int] = (0, 0, 0, 0)
    model: str = "claude-test"

    def body(self, n: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": self.text}] if self.text else []
        content += [
            {"type": "tool_use", "id": i, "name": name, "input": args}
            for i, name, args in self.calls
        ]
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": "tool_use" if self.calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.usage[0],
                "output_tokens": self.usage[1],
                "cache_creation_input_tokens": self.usage[2],
                "cache_read_input_tokens": self.usage[3],
            },
        }


class ScriptedMessages(ScriptedModelServer[Message]):
    """Serves ``messages`` in order (the last one repeats) on an ephemeral 127.0.0.1 port."""

    def respond(self, path: str, body: dict[str, Any], reply: Message, n: int) -> Answer:
        return reply.body(n)
