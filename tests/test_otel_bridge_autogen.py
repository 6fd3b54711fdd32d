"""AutoGen AgentChat through the span bridge and its stopping model client, in its own venv.

AutoGen AgentChat (verified against 0.7.5) writes autogen-core's GenAI spans:
``invoke_agent NAME`` around an agent's run, ``execute_tool NAME`` around each tool call
(its call id, no arguments or result), no model spans. An OpenAI instrumentor adds the
model calls under the agent's span: OpenInference's (0.1.66) or
``opentelemetry-instrumentation-openai`` (0.62.4), the one AutoGen's tracing guide uses.
``tests/_autogen_app.py`` drives an ``AssistantAgent`` on AutoGen's
``OpenAIChatCompletionClient`` against a scripted server on 127.0.0.1, in the venv that
``make bridge-venvs`` builds, and prints what the processor reported.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_AUTOGEN = "0.7.5"
VERIFIED_INSTRUMENTORS = {
    "openinference-instrumentation-openai": "0.1.66",
    "opentelemetry-instrumentation-openai": "0.62.4",
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("autogen").exists() and not os.environ.get("CI"),
        reason="AutoGen's venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, *flags: str) -> dict[str, Any]:
    return run_app("autogen", "_autogen_app.py", scenario, *flags)


def test_the_venv_has_the_verified_autogen_release() -> None:
    for distribution in ("autogen-agentchat", "autogen-core", "autogen-ext"):
        assert installed_version("autogen", distribution) == VERIFIED_AUTOGEN
    for distribution, version in VERIFIED_INSTRUMENTORS.items():
        assert installed_version("autogen", distribution) == version


@pytest.mark.parametrize(
    "flags",
    [
        ("--instrument-openai",),
        ("--instrument-openai-guide",),
        ("--instrument-openai", "--group-by", "trace"),
        ("--instrument-openai", "--stream"),
        # both instrumentors on the same client: still one model call per request
        ("--instrument-openai", "--instrument-openai-guide"),
    ],
)
def test_an_agent_is_one_named_run_each_call_counted_once(flags: tuple[str, ...]) -> None:
    got = _run("productive", *flags)
    assert got["answer"] == "3 and 7"
    assert got["raised"] is None
    assert got["agents"] == ["calc"]
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    # from the model spans' tool calls: AutoGen's tool spans carry neither arguments nor result
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["results"] == [None, None]
    assert got["detections"] == []
    assert got["skipped_attributes"] == 0
    assert got["open_runs"] == 0


def test_without_an_openai_instrumentor_there_are_tools_and_no_model_calls() -> None:
    got = _run("productive")
    assert got["agents"] == ["calc"]
    assert got["model_calls"] == 0
    assert got["tools"] == ["add", "add"]
    assert got["open_runs"] == 0


@pytest.mark.parametrize("instrumentor", ["--instrument-openai", "--instrument-openai-guide"])
def test_a_runaway_is_detected_and_new_work_is_not(instrumentor: str) -> None:
    got = _run("runaway", instrumentor)
    assert got["detections"] == ["warn", "stop"]  # reported: nothing stops it here
    assert got["served"] == 7
    assert _run("six_jobs", instrumentor)["detections"] == []


@pytest.mark.parametrize(
    ("instrumentor", "switch"),
    [
        ("--instrument-openai", {"OPENINFERENCE_HIDE_OUTPUTS": "true"}),
        ("--instrument-openai-guide", {"TRACELOOP_TRACE_CONTENT": "false"}),
    ],
)
def test_content_off_usage_is_exact_and_nothing_is_compared(
    instrumentor: str, switch: dict[str, str]
) -> None:
    """The instrumentor's content switch off: the model spans carry no tool calls, so the
    repetition detector has nothing to compare (no detection, no false alarm)."""
    got = run_app("autogen", "_autogen_app.py", "runaway", instrumentor, **switch)
    assert (got["model_calls"], got["input_tokens"], got["output_tokens"]) == (7, 21, 7)
    assert got["tools"] == ["poll"] * 6
    assert got["arguments"] == [{}] * 6
    assert got["detections"] == []


def test_without_the_model_spans_a_runaway_is_no_detection_and_no_false_alarm() -> None:
    assert _run("runaway")["detections"] == []


@pytest.mark.parametrize(
    "flags",
    [
        ("--instrument-openai",),
        ("--instrument-openai-guide",),
        ("--instrument-openai", "--stream"),
        ("--instrument-openai", "--group-by", "trace"),
    ],
)
def test_the_model_client_stops_a_runaway_before_the_next_model_call(
    flags: tuple[str, ...],
) -> None:
    """LoopobsModelClient around the agent's client: the stop the policy decided on the third
    identical poll is raised from create(), so agent.run() raises RunStopped and the fourth
    model call never goes out."""
    got = _run("runaway", "--stop", "--stop-after", "3", *flags)
    assert got["raised"].startswith("RunStopped: stopped: the tool call pattern poll(")
    assert got["detections"] == ["stop"]
    assert got["runs_ended"] == ["loop_detected"]
    assert got["served"] == 3
    assert got["tools"] == ["poll"] * 3
    assert got["open_runs"] == 0


def test_the_model_client_stops_a_run_over_its_token_budget_before_the_next_model_call() -> None:
    """A BudgetGuard among the processor's detectors: the second call's usage (19 + 25 tokens)
    crosses the budget of 30, so the third model call never goes out."""
    got = _run("productive", "--instrument-openai", "--stop", "--budget-tokens", "30")
    assert got["raised"] == "RunStopped: run budget exceeded: total_tokens 44 > 30"
    assert got["budget_verdicts"] == ["stop"]
    assert got["runs_ended"] == ["budget_exceeded"]
    assert got["served"] == got["model_calls"] == 2
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20, 7 + 5)
    assert got["open_runs"] == 0


@pytest.mark.parametrize("raw", [False, True])
def test_in_a_team_the_stop_ends_the_run_and_run_observed_raises_it(raw: bool) -> None:
    """A team runs its agents on AutoGen's runtime, which hands an agent's exception back as
    a RuntimeError carrying its text; run_observed() raises the RunStopped itself. Either way
    the run stops before the next model call."""
    flags = ("--raw",) if raw else ()
    got = _run("runaway", "--instrument-openai", "--team", "--stop", "--stop-after", "3", *flags)
    stopped = "RunStopped: stopped: the tool call pattern poll("
    assert got["raised"].startswith(f"RuntimeError: {stopped}" if raw else stopped)
    assert got["runs_ended"] == ["loop_detected"]
    assert got["served"] == 3


def test_the_model_client_leaves_new_work_and_a_productive_run_alone() -> None:
    got = _run("six_jobs", "--instrument-openai", "--stop", "--stop-after", "3")
    assert (got["answer"], got["raised"], got["served"]) == ("all queued", None, 7)
    got = _run("productive", "--instrument-openai", "--stop")
    assert (got["answer"], got["raised"], got["served"]) == ("3 and 7", None, 3)
    # the agent's config dumps the wrapped client: it loads back without loopobs
    assert got["dumped"] == ["autogen_ext.models.openai.OpenAIChatCompletionClient"]


def test_the_docs_page_example_stops_its_runaway() -> None:
    got = _run("doc")
    assert got["printed"][-2].startswith("stopped: the tool call pattern poll(")
    assert got["printed"][-1] == "loop_detected 9"
    assert got["served"] == 3
