"""A minimal OTLP/HTTP trace receiver on 127.0.0.1 for CLI tests: decodes and keeps every span.

It parses requests with the official protobuf classes (``opentelemetry-proto``),
so what it counts is what a collector would decode. ``POST /v1/traces`` is
answered 200 (or the status set in ``status``), ``/v1/metrics`` is answered 200
and only recorded in ``paths``; any other path gets 404, as a
real receiver answers a wrong URL. The end-to-end tests use Phoenix instead.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    """One span as it arrived: the fields the tests compare."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


@dataclass
class OtlpSink:
    """The receiver's state: its URL, the spans received, and the status it answers."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    paths: list[str] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    """Seconds to wait before answering each trace request (a slow receiver)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def _decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=span.status.code,
                        status_message=span.status.message,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        resource=resource,
                    )
                )
    return out


@contextmanager
def otlp_sink() -> Iterator[OtlpSink]:
    """Serve a receiver on a free loopback port for the duration of the block."""
    sink = OtlpSink()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with sink.lock:
                sink.paths.append(self.path)
            if self.path == "/v1/metrics":
                self._answer(200, b"")
                return
            if self.path != "/v1/traces":
                self._answer(404, b"not found")
                return
            if sink.delay_s:
                time.sleep(sink.delay_s)
            spans = _decode(body)
            with sink.lock:
                sink.requests += 1
                status = sink.status
                if status == 200:
                    sink.spans.extend(spans)
            self._answer(status, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    sink.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-sink", daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
