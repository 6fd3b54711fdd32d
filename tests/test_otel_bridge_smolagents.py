"""The span bridge on smolagents' spans: a real smolagents agent in its own venv.

smolagents (verified against 1.26.0) writes no spans itself; OpenInference's smolagents
instrumentor (0.1.43) writes the agent run, each model call (with usage) and each tool call.
``tests/_smolagents_app.py`` drives a ``ToolCallingAgent`` on smolagents' own
``OpenAIServerModel`` against a scripted server on 127.0.0.1, in the venv that ``make
bridge-venvs`` builds, and prints what the processor reported; with ``--stop``,
``loopobs.adapters.smolagents.LoopobsStepCallback`` interrupts a stopped run.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_SMOLAGENTS = "1.26.0"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("smolagents").exists() and not os.environ.get("CI"),
        reason="smolagents' venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, *flags: str) -> dict[str, Any]:
    return run_app("smolagents", "_smolagents_app.py", scenario, *flags)


def test_the_venv_has_the_verified_smolagents_release() -> None:
    assert installed_version("smolagents", "smolagents") == VERIFIED_SMOLAGENTS


@pytest.mark.parametrize("flags", [(), ("--instrument-openai",)])
def test_an_agent_is_one_named_run_each_call_counted_once(flags: tuple[str, ...]) -> None:
    got = _run("productive", *flags)
    assert got["answer"] == "3 and 7"
    assert got["agents"] == ["calc"]  # the span is "calc.run": the name is the agent's
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add", "final_answer"]
    assert got["arguments"][:2] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["results"][:2] == ["3", "7"]
    assert got["open_runs"] == 0


def test_a_runaway_is_detected_and_new_work_is_not() -> None:
    assert _run("runaway")["detections"] == ["warn", "stop"]
    assert _run("six_jobs")["detections"] == []


def test_a_runaway_is_stopped_by_the_step_callback_before_the_next_model_call() -> None:
    got = _run("runaway", "--stop")
    assert got["raised"].startswith("RunStopped: stopped: the tool call pattern poll(")
    assert got["detections"] == ["warn", "stop"]
    assert got["runs_ended"] == ["loop_detected"]
    assert got["served"] == 5  # the sixth model call never went out
    assert got["tools"] == ["poll"] * 5
    assert got["steps"] >= 5  # the agent's memory keeps the steps up to the stop
    assert got["open_runs"] == 0


def test_the_step_callback_leaves_new_work_alone() -> None:
    got = _run("six_jobs", "--stop")
    assert (got["answer"], got["raised"]) == ("all queued", "")
    assert got["detections"] == []
    assert got["runs_ended"] == ["completed"]
