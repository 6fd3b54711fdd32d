"""A hostile MCP server over stdio, speaking raw JSON-RPC lines so each misbehaviour is exact.

Run as ``python -m tests.mcp_servers.hostile_server MODE PID_FILE``; it writes its process id
to ``PID_FILE`` first. Modes:

- ``silent``: reads every message and never answers any (not even ``initialize``);
- ``no_list``: answers the handshake, never ``tools/list``;
- ``endless_pages``: every ``tools/list`` page names a next cursor;
- ``flood``: well behaved, with the tool ``flood`` (``{"n": N}``): N ``list_changed``
  notifications, then its result; ``listings`` answers how many ``tools/list`` requests
  arrived; with ``hang_refresh`` in the arguments of ``flood``, later listings are never
  answered.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_VERSION = "2025-06-18"


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": name, "inputSchema": {"type": "object"}}


def _text(request_id: Any, text: str) -> None:
    _send({"id": request_id, "result": {"content": [{"type": "text", "text": text}]}})


def main(mode: str, pid_file: str) -> None:
    with open(pid_file, "w", encoding="utf-8") as out:
        out.write(str(os.getpid()))
    listings = 0
    hang_listings = False
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None or mode == "silent":
            continue  # a notification, or a server that never answers
        params = message.get("params") or {}
        if method == "initialize":
            _send(
                {
                    "id": request_id,
                    "result": {
                        "protocolVersion": params.get("protocolVersion", _VERSION),
                        "capabilities": {"tools": {"listChanged": True}},
                        "serverInfo": {"name": "hostile", "version": "0"},
                    },
                }
            )
        elif method == "tools/list":
            listings += 1
            if mode == "no_list" or hang_listings:
                continue
            if mode == "endless_pages":
                page = int(params.get("cursor") or 0) + 1
                _send(
                    {
                        "id": request_id,
                        "result": {"tools": [_tool(f"t{page}")], "nextCursor": str(page)},
                    }
                )
                continue
            _send({"id": request_id, "result": {"tools": [_tool("flood"), _tool("listings")]}})
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "flood":
                hang_listings = bool(arguments.get("hang_refresh"))
                for _ in range(int(arguments.get("n", 1000))):
                    _send({"method": "notifications/tools/list_changed"})
                _text(request_id, "flooded")
            else:
                _text(request_id, str(listings))
        else:
            _send({"id": request_id, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
