"""A scripted Gemini API (``generateContent``) server on 127.0.0.1, for google-genai clients.

Each POST to ``/{version}/models/{model}:generateContent`` takes the next scripted
:class:`GeminiReply` and answers with one JSON ``GenerateContentResponse`` as the real API
does (camelCase fields, ``usageMetadata``); ``:streamGenerateContent?alt=sse`` answers the
same response as one SSE chunk per text word and a last chunk carrying the usage. Requests
are kept in :attr:`GeminiServer.requests`, paths in :attr:`GeminiServer.paths`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tests._model_server import Answer, ScriptedModelServer


@dataclass(frozen=True)
class GeminiReply:
    """One scripted response: text, function calls ``(id, name, args)``, usage (prompt, output)."""

    text: str = ""
    calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    usage: tuple[int, int] | None = (0, 0)
    model: str = "gemini-test"

    def parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [{"text": self.text}] if self.text else []
        parts += [{"functionCall": {"id": i, "name": n, "args": a}} for i, n, a in self.calls]
        return parts

    def response(self, n: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": self.parts()},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "modelVersion": self.model,
            "responseId": f"resp-{n}",
        }
        if self.usage is not None:
            body["usageMetadata"] = {
                "promptTokenCount": self.usage[0],
                "candidatesTokenCount": self.usage[1],
                "totalTokenCount": sum(self.usage),
            }
        return body

    def chunks(self, n: int) -> Iterator[dict[str, Any]]:
        words = self.text.split(" ") if self.text else []
        for word in words[:-1]:
            yield {
                "candidates": [
                    {"content": {"role": "model", "parts": [{"text": word + " "}]}, "index": 0}
                ],
                "modelVersion": self.model,
                "responseId": f"resp-{n}",
            }
        last = GeminiReply(words[-1] if words else "", self.calls, self.usage, self.model)
        yield last.response(n)


class GeminiServer(ScriptedModelServer[GeminiReply]):
    """Serves ``replies`` in order (the last one repeats) on an ephemeral 127.0.0.1 port."""

    def respond(self, path: str, body: dict[str, Any], reply: GeminiReply, n: int) -> Answer:
        if ":streamGenerateContent" not in path:
            return reply.response(n)
        return (f"data: {json.dumps(chunk)}\r\n\r\n".encode() for chunk in reply.chunks(n))
