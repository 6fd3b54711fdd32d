"""Finding and starting the real backends the end-to-end tests use.

``scripts/install-backends.sh`` (run by ``make test`` and ``.ci/run``) installs
Prometheus and a Phoenix venv and writes their paths to ``scripts/backends.env``.
A missing backend fails the test in CI (``CI=true``) and skips it elsewhere,
with the reason and the command that installs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import httpx
import pytest

INSTALL_HINT = "run `make backends` (scripts/install-backends.sh) to install it"


def require_binary(env_var: str, name: str, *fallbacks: str) -> str:
    """The path of a backend binary, from ``env_var``, PATH or ``fallbacks``.

    Fails in CI and skips elsewhere when it cannot be found.
    """
    candidates = [os.environ.get(env_var, ""), shutil.which(name) or "", *fallbacks]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    message = f"{name} not found (set {env_var}, or {INSTALL_HINT})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI requires the real backend: {message}")
    pytest.skip(message)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http_ok(url: str, timeout_s: float) -> None:
    """Poll ``url`` until it answers 200, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.2)
    pytest.fail(f"{url} not ready after {timeout_s}s: {last}")
