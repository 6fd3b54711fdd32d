"""The span bridge on Microsoft Agent Framework's own spans: a real agent in its own venv.

The framework (verified against agent-framework-core 1.23.0 with agent-framework-openai
1.17.0) sets its spans' attributes just after they start: with ``group_by="agent"`` the
bridge reported no run, otherwise a run named ``agent``, and with the OpenAI instrumentor on
every model call twice. ``tests/_maf_app.py`` drives an ``Agent`` on the framework's own
``OpenAIChatCompletionClient`` against a scripted server on 127.0.0.1, in the venv that
``make bridge-venvs`` builds, and prints what the processor reported. Content is off
unless ``ENABLE_SENSITIVE_DATA=true``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED = {"agent-framework-core": "1.23.0", "agent-framework-openai": "1.17.0"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("maf").exists() and not os.environ.get("CI"),
        reason="the framework's venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, *flags: str, sensitive: bool = False) -> dict[str, Any]:
    return run_app(
        "maf",
        "_maf_app.py",
        scenario,
        *flags,
        ENABLE_SENSITIVE_DATA="true" if sensitive else "false",
    )


def test_the_venv_has_the_verified_releases() -> None:
    for distribution, version in VERIFIED.items():
        assert installed_version("maf", distribution) == version


@pytest.mark.parametrize(
    "flags", [(), ("--instrument-openai",), ("--instrument-openai", "--group-by", "trace")]
)
def test_an_agent_is_one_named_run_each_call_counted_once(flags: tuple[str, ...]) -> None:
    got = _run("productive", *flags)
    assert got["answer"] == "3 and 7"
    assert got["agents"] == ["calc"]
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["open_runs"] == 0


def test_content_off_new_work_is_no_loop() -> None:
    got = _run("six_jobs")
    assert got["results"] == [None] * 6
    assert got["detections"] == []


def test_sensitive_data_on_a_runaway_is_detected_and_new_work_is_not() -> None:
    runaway = _run("runaway", sensitive=True)
    assert runaway["arguments"] == [{"job": "42"}] * 6
    assert runaway["detections"] == ["warn", "stop"]
    assert _run("six_jobs", sensitive=True)["detections"] == []
