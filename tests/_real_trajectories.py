"""The real trajectories, for tests that check a fast path against every real input.

They are third-party data, never copied into the repository: read where
``LOOPOBS_REAL_TRAJECTORIES`` points (``.ci/run`` points it at this machine's copy), and
the tests that need them skip, saying so, when it is unset.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

ENV_VAR = "LOOPOBS_REAL_TRAJECTORIES"

needs_real_trajectories = pytest.mark.skipif(
    ENV_VAR not in os.environ, reason="no real trajectories given"
)


def real_records() -> list[dict[str, Any]]:
    """Every record of the set, as its JSON lines hold it."""
    with open(os.environ[ENV_VAR], encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def real_calls() -> list[dict[str, Any]]:
    """Every tool call op of every record, in order."""
    return [op for rec in real_records() for op in rec.get("ops", []) if op.get("op") == "call"]


def real_command_lines() -> set[str]:
    """Every distinct command line (a call's ``command`` argument that is a string)."""
    return {
        op["args"]["command"]
        for op in real_calls()
        if isinstance((op.get("args") or {}).get("command"), str)
    }
