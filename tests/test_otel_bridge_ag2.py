"""The span bridge on AG2's own spans: a real AG2 agent in its own venv.

AG2 (verified against 1.2.1) writes its spans through its ``TelemetryMiddleware``
(``invoke_agent``, ``chat``, ``execute_tool``; content unless ``capture_content=False``),
setting their attributes just after they start, and its model spans' output messages in
OpenAI's message shape. ``tests/_ag2_app.py`` drives an ``Agent`` on AG2's own
``OpenAIConfig`` against a scripted server on 127.0.0.1, in the venv that ``make
bridge-venvs`` builds, and prints what the processor reported.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_AG2 = "1.2.1"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("ag2").exists() and not os.environ.get("CI"),
        reason="AG2's venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, *flags: str) -> dict[str, Any]:
    return run_app("ag2", "_ag2_app.py", scenario, *flags)


def test_the_venv_has_the_verified_ag2_release() -> None:
    assert installed_version("ag2", "ag2") == VERIFIED_AG2


@pytest.mark.parametrize(
    "flags", [(), ("--instrument-openai",), ("--instrument-openai", "--group-by", "trace")]
)
def test_an_ag2_agent_is_one_named_run_each_call_counted_once(flags: tuple[str, ...]) -> None:
    got = _run("productive", *flags)
    assert got["answer"] == "3 and 7"
    assert got["agents"] == ["calc"]
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["results"] == ["3", "7"]
    assert got["skipped_attributes"] == 0  # its OpenAI-style output messages are read
    assert got["open_runs"] == 0


def test_content_on_a_runaway_is_detected_and_new_work_is_not() -> None:
    assert _run("runaway")["detections"] == ["warn", "stop"]
    assert _run("six_jobs")["detections"] == []


def test_capture_content_off_new_work_is_no_loop() -> None:
    got = _run("six_jobs", "--no-content")
    assert got["results"] == [None] * 6
    assert got["detections"] == []


@pytest.mark.parametrize("flags", [(), ("--instrument-openai", "--group-by", "trace")])
def test_the_middleware_stops_a_runaway_before_the_next_model_call(flags: tuple[str, ...]) -> None:
    """LoopobsAG2Middleware after TelemetryMiddleware: the stop the policy decided on the
    third identical poll is raised from on_llm_call, so agent.ask() raises RunStopped and
    the fourth model call never goes out."""
    got = _run("runaway", "--stop", "--stop-after", "3", *flags)
    assert got["raised"].startswith("RunStopped: stopped: the tool call pattern poll(")
    assert got["runs_ended"] == ["loop_detected"]
    assert got["served"] == 3
    assert got["tools"] == ["poll"] * 3


def test_the_middleware_leaves_new_work_and_a_warned_run_alone() -> None:
    assert _run("six_jobs", "--stop", "--stop-after", "3")["answer"] == "all queued"
    got = _run("productive", "--stop")
    assert (got["answer"], got["raised"], got["served"]) == ("3 and 7", None, 3)
