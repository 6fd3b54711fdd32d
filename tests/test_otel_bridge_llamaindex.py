"""The span bridge on LlamaIndex under OpenInference's instrumentation, in its own venv.

OpenInference's LlamaIndex instrumentation (verified against llama-index-core 0.14.25 and
openinference-instrumentation-llama-index 4.6.1) writes, per model call, an
``OpenAI._prepare_chat_with_tools`` span of kind ``LLM`` that sends no request beside the
span of the call, and tool spans without a call id: the bridge counted every call twice
and received every tool call twice. ``tests/_llamaindex_app.py`` drives a
``FunctionAgent`` on LlamaIndex's ``OpenAI`` LLM against a scripted server on 127.0.0.1.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED = {"llama-index-core": "0.14.25", "openinference-instrumentation-llama-index": "4.6.1"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("llamaindex").exists() and not os.environ.get("CI"),
        reason="LlamaIndex's venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str) -> dict[str, Any]:
    return run_app("llamaindex", "_llamaindex_app.py", scenario)


def test_the_venv_has_the_verified_releases() -> None:
    for distribution, version in VERIFIED.items():
        assert installed_version("llamaindex", distribution) == version


def test_each_model_call_counts_once_and_each_tool_call_is_received_once() -> None:
    got = _run("productive")
    assert got["answer"] == "3 and 7"
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["runs_ended"] == ["completed"]
    assert got["open_runs"] == 0


def test_a_runaway_is_detected_and_new_work_is_not() -> None:
    assert _run("runaway")["detections"] == ["warn", "stop"]
    assert _run("six_jobs")["detections"] == []
