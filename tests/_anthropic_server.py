"""A scripted Anthropic Messages API server on 127.0.0.1, for the ``anthropic`` SDK.

Each POST to ``/v1/messages`` takes the next scripted :class:`Message` and answers
with one JSON message, as the API does without streaming. Requests are kept in
:attr:`ScriptedMessages.requests`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


class ScriptedMessages:
    """Serves ``messages`` in order (the last one repeats) on an ephemeral 127.0.0.1 port."""

    def __init__(self, messages: Iterable[Message]) -> None:
        self.messages = list(messages)
        self.requests: list[dict[str, Any]] = []
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
                    message = server.messages[min(n, len(server.messages) - 1)]
                data = json.dumps(message.body(n)).encode()
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

    def __enter__(self) -> ScriptedMessages:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
