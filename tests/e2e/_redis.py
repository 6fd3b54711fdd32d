"""A real ``redis-server`` per test (Debian's package; ``scripts/install-backends.sh``)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._backends import free_port, require_binary


class RedisServer:
    """One redis-server on 127.0.0.1 with no persistence, stoppable and restartable."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's address for ``redis.asyncio.Redis.from_url``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait (at most 10 s) until it answers PING."""
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        import redis

        client = redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=1, socket_connect_timeout=1
        )
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return
                if self.process.poll() is not None:
                    pytest.fail(f"redis-server exited with {self.process.returncode}")
                time.sleep(0.05)
        finally:
            client.close()
        pytest.fail("redis-server did not answer PING within 10 s")

    def stop(self) -> None:
        """Kill the server (as a crash would) and wait for it to go."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh, empty Redis for one test; fails in CI and skips elsewhere when missing."""
    pytest.importorskip(
        "redis", reason="the redis extra is not installed (pip install loopobs[redis])"
    )
    binary = require_binary("LOOPOBS_REDIS_BIN", "redis-server", "/usr/bin/redis-server")
    server = RedisServer(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
