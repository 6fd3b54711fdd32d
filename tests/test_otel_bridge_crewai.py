"""CrewAI through the span bridge and its stop hook: a real CrewAI crew in its own venv.

CrewAI (verified against 1.15.30) writes no GenAI spans of its own; OpenInference's CrewAI
instrumentor (1.1.21) writes the crew's, tasks' and agents' spans and the tools', its OpenAI
instrumentor the model calls. ``tests/_crewai_app.py`` drives a ``Crew`` on CrewAI's own
``LLM`` against a scripted OpenAI server on 127.0.0.1, in the venv ``make bridge-venvs``
builds, with :class:`~loopobs.adapters.crewai.LoopobsCrewHook` registered, and prints what
the processor reported.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_CREWAI = "1.15.30"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("crewai").exists() and not os.environ.get("CI"),
        reason="CrewAI's venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, *flags: str) -> dict[str, Any]:
    return run_app("crewai", "_crewai_app.py", scenario, *flags)


def test_the_venv_has_the_verified_crewai_release() -> None:
    assert installed_version("crewai", "crewai") == VERIFIED_CREWAI


def test_a_crew_is_one_run_with_the_model_calls_usage() -> None:
    got = _run("productive", "--instrument-openai")
    assert got["answer"] == "3 and 7"
    assert got["raised"] is None
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["results"] == ["3", "7"]
    assert got["open_runs"] == 0


def test_without_the_openai_instrumentor_there_are_tools_and_no_model_calls() -> None:
    got = _run("productive")
    assert got["answer"] == "3 and 7"
    assert got["model_calls"] == 0
    assert got["tools"] == ["add", "add"]


def test_a_runaway_is_stopped_by_the_hook_before_the_next_model_call() -> None:
    got = _run("runaway", "--instrument-openai")
    assert got["raised"].startswith("RunStopped: stopped: the tool call pattern poll(")
    assert got["detections"] == ["stop"]
    assert got["runs_ended"] == ["loop_detected"]
    assert got["served"] == 3  # the fourth model call never went out
    assert got["tools"] == ["poll"] * 3


def test_without_the_hook_the_runaway_goes_on_until_crewais_own_check() -> None:
    got = _run("runaway", "--instrument-openai", "--no-hook")
    assert got["detections"] == ["stop"]  # reported, not enforced
    assert got["served"] == 5
    assert got["raised"].startswith("ToolExecutionFailedError")


def test_new_work_is_no_loop() -> None:
    got = _run("six_jobs", "--instrument-openai")
    assert got["answer"] == "all queued"
    assert got["detections"] == []
    assert got["runs_ended"] == ["completed"]


def test_the_docs_page_example_stops_its_runaway() -> None:
    got = _run("doc")
    assert got["printed"][-2].startswith("stopped: the tool call pattern poll(")
    assert got["printed"][-1] == "loop_detected 9"
    assert got["served"] == 3
