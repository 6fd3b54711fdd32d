"""Helpers for the MCP tests: the test server as a stdio spec or an HTTP/SSE process, checks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopobs.mcp import McpHttp, McpSse, McpStdio

REPO = Path(__file__).resolve().parent.parent
SERVER_MODULE = "tests.mcp_servers.tool_server"


def stdio_server(errlog: Any, **kwargs: Any) -> McpStdio:
    """The test server as a child process (``errlog``: an open file for its stderr)."""
    kwargs.setdefault("name", "test")
    return McpStdio(sys.executable, ["-m", SERVER_MODULE], cwd=str(REPO), errlog=errlog, **kwargs)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("State:"):
                return "Z" not in line.split()[1]
    return True


def children_of(pid: int) -> set[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connections_to(port: int) -> int:
    """How many of this process's sockets are connected (ESTABLISHED) to 127.0.0.1:``port``."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


@contextlib.contextmanager
def served(
    log: Path, transport: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The test server on 127.0.0.1 over ``transport`` (``http`` or ``sse``): process and port.

    The process is terminated (killed if need be) and reaped when the block ends.
    """
    port = _free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, transport, str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the test MCP server exited: {log.read_text()}")
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the test MCP server did not listen: {log.read_text()}")
                time.sleep(0.05)
            yield process, port
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def http_server(log: Path, env: dict[str, str] | None = None) -> Iterator[McpHttp]:
    """The test server on 127.0.0.1 over streamable HTTP, for the ``with`` block."""
    with served(log, "http", env) as (_, port):
        yield McpHttp(f"http://127.0.0.1:{port}/mcp", name="http-test")


@contextlib.contextmanager
def sse_server(
    log: Path, env: dict[str, str] | None = None, **kwargs: Any
) -> Iterator[tuple[McpSse, int]]:
    """The test server on 127.0.0.1 over HTTP+SSE, for the ``with`` block: spec and pid."""
    kwargs.setdefault("name", "sse-test")
    with served(log, "sse", env) as (process, port):
        yield McpSse(f"http://127.0.0.1:{port}/sse", **kwargs), process.pid
