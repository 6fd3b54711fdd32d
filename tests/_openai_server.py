"""A scripted OpenAI-compatible chat completions server on 127.0.0.1, for instrumented clients.

Each POST to ``/v1/chat/completions`` takes the next scripted :class:`Reply` and
answers as the real API does: one JSON completion, or with ``"stream": true`` an
SSE stream of chunks ending with a usage chunk and ``[DONE]``. Requests are kept
in :attr:`ScriptedServer.requests`. ``ScriptedServer(..., usage_when_asked=True)``
streams the usage chunk as the real API does: only for a request with
``stream_options.include_usage``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests._model_server import Answer, ScriptedModelServer


@dataclass(frozen=True)
class Reply:
    """One scripted completion: text, tool calls ``(id, name, arguments)``, usage (None: a
    server that reports none, neither in a completion nor in a stream)."""

    text: str = ""
    calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    usage: tuple[int, int] | None = (0, 0)
    model: str = "gpt-test"
    extra: dict[str, Any] = field(default_factory=dict)
    response_id: str = ""  # the id to answer with (default: chatcmpl-<request number>)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in self.calls
        ]

    def completion(self, n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = self.tool_calls()
        completion: dict[str, Any] = {
            "id": self.response_id or f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if self.calls else "stop",
                }
            ],
        }
        if self.usage is not None:
            completion["usage"] = self._usage()
        return completion

    def _usage(self) -> dict[str, int]:
        assert self.usage is not None
        return {
            "prompt_tokens": self.usage[0],
            "completion_tokens": self.usage[1],
            "total_tokens": sum(self.usage),
        }

    def chunks(self, n: int, *, usage: bool = True) -> Iterator[dict[str, Any]]:
        base = {
            "id": self.response_id or f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": self.model,
        }
        yield {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ],
        }
        for word in self.text.split(" ") if self.text else ():
            yield {
                **base,
                "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}],
            }
        for index, call in enumerate(self.tool_calls()):
            yield {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": index, **call}]},
                        "finish_reason": None,
                    }
                ],
            }
        yield {
            **base,
            "choices": [
                {"index": 0, "delta": {}, "finish_reason": "tool_calls" if self.calls else "stop"}
            ],
        }
        if usage and self.usage is not None:
            yield {**base, "choices": [], "usage": self._usage()}


class ScriptedServer(ScriptedModelServer[Reply]):
    """Serves ``replies`` in order (the last one repeats) on an ephemeral 127.0.0.1 port."""

    url_prefix = "/v1"

    def __init__(self, replies: Iterable[Reply], *, usage_when_asked: bool = False) -> None:
        super().__init__(replies)
        self.usage_when_asked = usage_when_asked

    def respond(self, path: str, body: dict[str, Any], reply: Reply, n: int) -> Answer:
        if not body.get("stream"):
            return reply.completion(n)
        asked = (body.get("stream_options") or {}).get("include_usage") is True
        usage = asked or not self.usage_when_asked
        return _frames(reply.chunks(n, usage=usage))


def _frames(chunks: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
