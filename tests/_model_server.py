"""The scaffold the scripted model servers share: a ``ThreadingHTTPServer`` on an
ephemeral 127.0.0.1 port that answers each POST with the next scripted reply.

A server for one provider's API subclasses :class:`ScriptedModelServer` and says how a
reply is written (:meth:`~ScriptedModelServer.respond`): a JSON body, or the frames of a
server-sent event stream. Requests (parsed JSON) and their paths are kept in order.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar

R = TypeVar("R")

Answer = dict[str, Any] | Iterator[bytes]
"""A JSON body, or the bytes of an event stream, frame by frame."""


class ScriptedModelServer(Generic[R]):
    """Serves ``replies`` in order (the last one repeats) on an ephemeral 127.0.0.1 port;
    a context manager that starts and stops it."""

    url_prefix = ""
    """What the API's base URL adds to ``http://host:port`` (``/v1`` for OpenAI's)."""

    def __init__(self, replies: Iterable[R]) -> None:
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
                answer = server.respond(self.path, body, reply, n)
                self.send_response(200)
                if isinstance(answer, dict):
                    data = json.dumps(answer).encode()
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for frame in answer:
                    self.wfile.write(frame)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def respond(self, path: str, body: dict[str, Any], reply: R, n: int) -> Answer:
        """The answer to request number ``n`` (from 0) with ``body``, posted to ``path``."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}{self.url_prefix}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
