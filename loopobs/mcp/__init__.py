"""MCP servers as tool sources (the ``mcp`` extra: ``pip install loopobs[mcp]``).

``AgentLoop(mcp_servers=[McpStdio("python", ["server.py"]), McpHttp("http://…/mcp")])``
adds the servers' tools to the loop. See ``docs/mcp.md`` for the lifecycle
(per run, or once with ``async with loop:``), name clashes, failures and the
telemetry each call carries.
"""

from loopobs.mcp.servers import McpHttp, McpServer, McpStdio
from loopobs.mcp.source import McpTool, McpToolSource

__all__ = ["McpHttp", "McpServer", "McpStdio", "McpTool", "McpToolSource"]
