"""How to reach an MCP server: :class:`McpStdio`, :class:`McpHttp`, :class:`McpSse`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from loopobs.contract.observer import ObserverSet
    from loopobs.mcp.source import McpToolSource

# The SDK's transports are imported when a server is first connected, so that describing
# servers (``AgentLoop(tool_sources=[...])``) costs no import of the ``mcp`` package.

__all__ = ["McpHttp", "McpServer", "McpSse", "McpStdio"]


@dataclass(frozen=True, kw_only=True)
class _Common:
    name: str | None = None
    """The server's name in errors and telemetry (default: from the command or URL)."""
    prefix: str | None = None
    """When set, the server's tools are named ``<prefix>_<tool>`` (to avoid name clashes)."""
    timeout: float = 30.0
    """Seconds a request (a tool call, a listing) may take before it fails with ``timeout``."""
    connect_timeout: float = 15.0
    """Seconds to start (or reach) the server, finish the handshake and list its tools."""
    restarts: int = 3
    """How many times a server that went away is started again (at its next call)."""

    def tool_name(self, remote: str) -> str:
        """The name the model sees for the server's tool ``remote``."""
        return f"{self.prefix}_{remote}" if self.prefix else remote

    async def connect(self, observers: ObserverSet) -> McpToolSource:
        """Start (or reach) the server, handshake and list its tools.

        Raises:
            McpError: the server could not be started or reached (``kind="server_down"``).
            ImportError: the ``mcp`` package is not installed.
        """
        from loopobs.mcp.source import McpToolSource

        # The concrete descriptions below complete the protocol (label, address, transport).
        return await McpToolSource.connect(self)  # type: ignore[arg-type]


@dataclass(frozen=True)
class McpStdio(_Common):
    """A server run as a child process speaking MCP on its stdin/stdout.

    ``env`` is added to a minimal default environment (the SDK's); the process's
    stderr goes to ``errlog`` (default: this process's stderr).
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, kw_only=True)
    cwd: str | os.PathLike[str] | None = field(default=None, kw_only=True)
    errlog: TextIO | None = field(default=None, kw_only=True, compare=False)

    @property
    def label(self) -> str:
        """The server's name."""
        return self.name or os.path.basename(self.command) or "stdio"

    @property
    def address(self) -> tuple[str | None, int | None]:
        """A child process has no network address."""
        return None, None

    def open_transport(
        self, stack: contextlib.AsyncExitStack, on_session: Callable[[str | None], None]
    ) -> Any:
        """The SDK's stdio transport: the child process, ended with its whole tree."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command,
            args=list(self.args),
            env=dict(self.env or {}) or None,
            cwd=os.fspath(self.cwd) if self.cwd is not None else None,
        )
        return stdio_client(params, errlog=self.error_log)

    @property
    def error_log(self) -> TextIO:
        """Where the process's stderr goes: ``errlog``, else this process's stderr.

        A child needs a real file: when ``sys.stderr`` was replaced by an object
        without one (captured output), the original stderr is used.
        """
        if self.errlog is not None:
            return self.errlog
        for stream in (sys.stderr, sys.__stderr__):
            try:
                if stream is not None:
                    stream.fileno()
                    return stream
            except (AttributeError, OSError, ValueError):
                continue
        return open(os.devnull, "w")


@dataclass(frozen=True)
class _Remote(_Common):
    """A server reached over HTTP at ``url``, with ``headers`` on every request."""

    url: str
    headers: Mapping[str, str] | None = field(default=None, kw_only=True)

    @property
    def label(self) -> str:
        """The server's name."""
        from urllib.parse import urlsplit

        return self.name or urlsplit(self.url).netloc or self.url

    @property
    def address(self) -> tuple[str | None, int | None]:
        """Host and port of ``url`` (the scheme's default port when it names none)."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


@dataclass(frozen=True)
class McpHttp(_Remote):
    """A server reached over MCP's streamable HTTP transport at ``url``."""

    def open_transport(
        self, stack: contextlib.AsyncExitStack, on_session: Callable[[str | None], None]
    ) -> Any:
        """The SDK's streamable HTTP transport over a client closed with ``stack``."""
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async def note_session(response: httpx2.Response) -> None:
            on_session(response.headers.get("mcp-session-id"))

        timeout = httpx2.Timeout(self.timeout, connect=self.connect_timeout, read=300.0)
        client = httpx2.AsyncClient(
            headers=dict(self.headers or {}),
            timeout=timeout,
            event_hooks={"response": [note_session]},
        )
        stack.push_async_callback(client.aclose)
        return streamable_http_client(self.url, http_client=client)


@dataclass(frozen=True)
class McpSse(_Remote):
    """A server reached over MCP's older HTTP+SSE transport: its event stream at ``url``.

    The client reads the server's messages from the stream (a ``GET`` of ``url``,
    kept open) and posts its own to the endpoint the stream names first. For
    servers that do not speak streamable HTTP yet.
    """

    def open_transport(
        self, stack: contextlib.AsyncExitStack, on_session: Callable[[str | None], None]
    ) -> Any:
        """The SDK's SSE transport; the session id is the one the endpoint event names."""
        from mcp.client.sse import sse_client

        return sse_client(
            self.url,
            headers=dict(self.headers or {}),
            timeout=self.timeout,
            sse_read_timeout=300.0,
            on_session_created=on_session,
        )


McpServer = McpStdio | McpHttp | McpSse
"""Any kind of server description."""
