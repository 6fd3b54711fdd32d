"""MCP servers as tool sources (the ``mcp`` extra: ``pip install loopobs[mcp]``).

``AgentLoop(tool_sources=[McpStdio("python", ["server.py"]), McpHttp("http://…/mcp")])``
adds the servers' tools to the loop (``McpSse(url)`` for a server on the older
HTTP+SSE transport). See ``docs/mcp.md`` for the lifecycle
(per run, or once with ``async with loop:``), name clashes, failures and the
telemetry each call carries.
"""

from loopobs.mcp.servers import McpHttp, McpServer, McpSse, McpStdio
from loopobs.mcp.source import McpTool, McpToolSource

__all__ = ["McpHttp", "McpServer", "McpSse", "McpStdio", "McpTool", "McpToolSource"]
