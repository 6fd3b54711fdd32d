"""A scripted Gemini API (``generateContent``) server on 127.0.0.1, for google-genai clients.

Each POST to ``/{version}/models/{model}:generateContent`` takes the next scripted
:class:`GeminiReply` and answers with one JSON ``GenerateContentResponse`` as the real API
does (camelCase fields, ``usageMetadata``); ``:streamGenerateContent?alt=sse`` answers the
same response as one SSE chunk per text word and a last chunk carrying the usage. Requests
are kept in :attr:`GeminiServer.requests`, paths in :attr:`GeminiServer.paths`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


class GeminiServer:
    """Serves ``replies`` in order (the last one repeats) on an ephemeral 127.0.0.1 port."""

    def __init__(self, replies: Iterable[GeminiReply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(body)
                    server.paths.append(self.path)
                    reply = server.replies[min(n, len(server.replies) - 1)]
                if ":streamGenerateContent" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for chunk in reply.chunks(n):
                        self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                    return
                data = json.dumps(reply.response(n)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> GeminiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
