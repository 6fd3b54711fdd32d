"""How to reach an MCP server: :class:`McpStdio`, :class:`McpHttp`, :class:`McpSse`."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from loopobs.core.observer import ObserverSet
    from loopobs.mcp.source import McpToolSource

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
    """Seconds to start the server and finish the handshake."""
    restarts: int = 3
    """How many times a server that went away is started again (at its next call)."""

    def tool_name(self, remote: str) -> str:
        """The name the model sees for the server's tool ``remote``."""
        return f"{self.prefix}_{remote}" if self.prefix else remote

    async def connect(self, emit: ObserverSet) -> McpToolSource:
        """Start (or reach) the server, handshake and list its tools.

        Raises:
            McpError: the server could not be started or reached (``kind="server_down"``).
            ImportError: the ``mcp`` package is not installed.
        """
        from loopobs.mcp.source import McpToolSource

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


@dataclass(frozen=True)
class McpHttp(_Remote):
    """A server reached over MCP's streamable HTTP transport at ``url``."""


@dataclass(frozen=True)
class McpSse(_Remote):
    """A server reached over MCP's older HTTP+SSE transport: its event stream at ``url``.

    The client reads the server's messages from the stream (a ``GET`` of ``url``,
    kept open) and posts its own to the endpoint the stream names first. For
    servers that do not speak streamable HTTP yet.
    """


McpServer = McpStdio | McpHttp | McpSse
"""Any kind of server description."""
