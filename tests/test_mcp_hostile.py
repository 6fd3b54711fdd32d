"""MCP servers that misbehave: every connect, listing and refresh ends within its deadline.

The hostile stdio server (``tests/mcp_servers/hostile_server.py``) speaks raw JSON-RPC so
that each misbehaviour is exact; the HTTP and SSE cases talk to a listener on 127.0.0.1
that accepts connections and never answers. Each connect runs under a hang guard far
longer than the deadline it checks: the guard firing is the failure.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

from loopobs import McpError, Output
from loopobs.mcp import McpHttp, McpSse, McpStdio, McpToolSource
from loopobs.mcp import source as mcp_source
from tests._mcp import REPO, alive

pytestmark = pytest.mark.slow  # starts server processes

HANG_GUARD_S = 30.0


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server.log").open("w") as out:
        yield out


def hostile(mode: str, tmp_path: Path, errlog: TextIO, **kwargs: Any) -> McpStdio:
    return McpStdio(
        sys.executable,
        ["-m", "tests.mcp_servers.hostile_server", mode, str(tmp_path / "pid")],
        cwd=str(REPO),
        errlog=errlog,
        name=mode,
        **kwargs,
    )


def server_pid(tmp_path: Path) -> int:
    return int((tmp_path / "pid").read_text())


async def text(source: McpToolSource, tool: str, arguments: dict[str, Any] | None = None) -> str:
    """The text the server's ``tool`` answers."""
    result = await source.tools()[tool].invoke(arguments or {})
    assert isinstance(result, Output)
    return str(result.value)


async def connect(spec: Any) -> McpToolSource:
    source: McpToolSource = await asyncio.wait_for(McpToolSource.connect(spec), HANG_GUARD_S)
    return source


async def test_a_server_that_never_answers_the_handshake_fails_at_connect_timeout(
    tmp_path: Path, errlog: TextIO
) -> None:
    with pytest.raises(McpError, match="did not answer the handshake") as caught:
        await connect(hostile("silent", tmp_path, errlog, connect_timeout=0.5))
    assert caught.value.kind == "server_down"
    assert not alive(server_pid(tmp_path))  # closing ended the process stuck in the handshake


async def test_a_server_that_never_answers_tools_list_fails_at_timeout(
    tmp_path: Path, errlog: TextIO
) -> None:
    with pytest.raises(McpError, match=r"did not answer tools/list within 0\.5s") as caught:
        await connect(hostile("no_list", tmp_path, errlog, timeout=0.5, connect_timeout=300))
    assert caught.value.kind == "timeout"
    assert not alive(server_pid(tmp_path))


async def test_endless_pagination_is_refused_after_the_page_limit(
    tmp_path: Path, errlog: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_source, "MAX_LIST_PAGES", 50)
    with pytest.raises(McpError, match="another page of tools after 50 pages") as caught:
        await connect(hostile("endless_pages", tmp_path, errlog, connect_timeout=300))
    assert caught.value.kind == "protocol"
    assert not alive(server_pid(tmp_path))


async def test_a_listing_past_the_tools_limit_is_refused(
    tmp_path: Path, errlog: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_source, "MAX_TOOLS", 20)
    with pytest.raises(McpError, match="more than 20 tools"):
        await connect(hostile("endless_pages", tmp_path, errlog, connect_timeout=300))


class SilentListener:
    """Accepts TCP connections on 127.0.0.1 and never reads or answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port: int = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


@pytest.mark.parametrize(("kind", "path"), [(McpHttp, "/mcp"), (McpSse, "/sse")])
async def test_remote_servers_that_accept_and_never_answer_fail_at_connect_timeout(
    silent: SilentListener, kind: type[McpHttp] | type[McpSse], path: str
) -> None:
    spec = kind(f"http://127.0.0.1:{silent.port}{path}", name="silent", connect_timeout=0.5)
    with pytest.raises(McpError, match=r"within 0\.5s") as caught:
        await connect(spec)
    assert caught.value.kind == "server_down"
    assert silent.conns  # it was reached: the deadline, not a refusal, ended the connect


async def test_a_list_changed_flood_runs_one_refresh_and_one_more(
    tmp_path: Path, errlog: TextIO
) -> None:
    source = await connect(hostile("flood", tmp_path, errlog))
    try:
        assert await text(source, "flood", {"n": 2000}) == "flooded"
        conn = source.connection
        assert conn is not None
        await asyncio.wait_for(conn.refreshed(), HANG_GUARD_S)
        # The connect's listing, the refresh the first notification started, and one more
        # for the 1,999 that arrived while it ran.
        assert await text(source, "listings") == "3"
        assert conn.listings == 3
    finally:
        await source.aclose()
    assert not alive(server_pid(tmp_path))


async def test_refreshes_that_are_never_answered_time_out_and_the_server_keeps_serving(
    tmp_path: Path, errlog: TextIO, caplog: pytest.LogCaptureFixture
) -> None:
    source = await connect(hostile("flood", tmp_path, errlog, timeout=0.5))
    try:
        with caplog.at_level(logging.WARNING, logger="loopobs.mcp"):
            assert await text(source, "flood", {"n": 500, "hang_refresh": True}) == "flooded"
            conn = source.connection
            assert conn is not None
            await asyncio.wait_for(conn.refreshed(), HANG_GUARD_S)
        failed = [r for r in caplog.records if "refreshing its tools failed" in r.getMessage()]
        assert len(failed) == 2  # the running refresh and the one pending, each timed out
        assert "within 0.5s" in failed[0].getMessage()
        assert set(source.tools()) == {"flood", "listings"}  # the old list stays
        assert await text(source, "listings") == "3"
    finally:
        await source.aclose()


async def test_a_run_with_a_server_that_never_answers_fails_instead_of_hanging(
    tmp_path: Path, errlog: TextIO
) -> None:
    from loopobs import AgentLoop
    from loopobs.llm.scripted import Reply, ScriptedClient

    loop = AgentLoop(
        ScriptedClient([Reply(text="never")]),
        model="m",
        tool_sources=[hostile("silent", tmp_path, errlog, connect_timeout=0.5)],
    )
    with pytest.raises(McpError, match="silent"):
        await asyncio.wait_for(loop.run("q"), HANG_GUARD_S)
    assert not alive(server_pid(tmp_path))
