"""A real MCP server for the tests, written with the SDK's server API.

Run as ``python -m tests.mcp_servers.tool_server [stdio|http PORT|sse PORT]``. Its tools:
``echo`` (returns its text), ``add``, ``fail`` (an ``isError`` result), ``reject`` (a JSON-RPC
error), ``crash`` (the process exits mid-call), ``sleep`` (waits), ``grow`` (adds a tool and sends
the list-changed notification) and ``pid`` (the server's process id).

With ``LOOPOBS_TEST_SPANS=<file>`` the process installs an OTel SDK tracer (in
its own process) whose spans are appended to that file as JSON lines, so a test
can see the server's ``tools/call`` span join the caller's trace.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ToolAnnotations


def _install_span_file(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class _FileExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with open(path, "a", encoding="utf-8") as out:
                for span in spans:
                    ctx = span.get_span_context()
                    parent = span.parent
                    if ctx is None:
                        continue
                    out.write(
                        json.dumps(
                            {
                                "name": span.name,
                                "trace_id": f"{ctx.trace_id:032x}",
                                "span_id": f"{ctx.span_id:016x}",
                                "parent_span_id": f"{parent.span_id:016x}" if parent else None,
                                "attributes": dict(span.attributes or {}),
                            }
                        )
                        + "\n"
                    )
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_FileExporter()))
    trace.set_tracer_provider(provider)  # this test server's own process only


def build() -> MCPServer:
    server = MCPServer("loopobs-test")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails (an isError result)."""
        raise ToolError(f"refused: {reason}")

    @server.tool()
    def crash() -> str:
        """The server process exits in the middle of the call."""
        os._exit(3)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait, then answer."""
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    def reject(value: str) -> str:
        """Answers with a JSON-RPC error (invalid params) instead of a result."""
        raise MCPError(INVALID_PARAMS, f"value {value!r} is not acceptable")

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool ``shout`` and tell the client its tool list changed."""

        def shout(text: str) -> str:
            """Upper-case the text."""
            return text.upper()

        server.add_tool(shout)
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


def main(argv: Sequence[str]) -> None:
    spans = os.environ.get("LOOPOBS_TEST_SPANS")
    if spans:
        _install_span_file(spans)
    server = build()
    if argv and argv[0] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    elif argv and argv[0] == "sse":
        server.run("sse", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
