"""The span bridge on Strands Agents' own spans: a real Strands agent in its own venv.

Strands (verified against 1.62.0) sets its spans' attributes just after they start, so
with ``group_by="agent"`` the bridge used to report no run at all, and with the OpenAI
instrumentor on it counted every model call twice. ``tests/_strands_app.py`` runs the
agent against a scripted OpenAI-compatible server on 127.0.0.1 in the venv that ``make
bridge-venvs`` builds and prints what the processor reported; these tests read it.
Both span shapes are run: the legacy one (Strands' default: content on span events) and
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_STRANDS = "1.62.0"
SHAPES = {"legacy": "", "latest": "gen_ai_latest_experimental"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not venv_python("strands").exists() and not os.environ.get("CI"),
        reason="Strands' venv is not built (make bridge-venvs)",
    ),
]


def _run(scenario: str, shape: str, *flags: str) -> dict[str, Any]:
    return run_app(
        "strands", "_strands_app.py", scenario, *flags, OTEL_SEMCONV_STABILITY_OPT_IN=SHAPES[shape]
    )


def test_the_venv_has_the_verified_strands_release() -> None:
    assert installed_version("strands", "strands-agents") == VERIFIED_STRANDS


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_strands_agent_is_one_named_run_with_exact_usage(shape: str) -> None:
    """group_by="agent": one run named as the agent, a model call per request served,
    the served tokens, the tools in order with their arguments and results."""
    got = _run("productive", shape)
    assert got["answer"] == "3 and 7"
    assert got["agents"] == ["calc"]
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["results"] == ["3", "7"]
    assert got["detections"] == []
    assert got["open_runs"] == 0


def test_with_the_openai_instrumentor_on_each_call_counts_once() -> None:
    """OpenInference's OpenAI instrumentor under Strands: its span nests in Strands' chat
    span for the same request; one call each (it was two), in trace grouping too."""
    for group_by in ("agent", "trace"):
        got = _run("productive", "legacy", "--instrument-openai", "--group-by", group_by)
        assert got["agents"] == ["calc"]
        assert got["model_calls"] == got["served"] == 3
        assert (got["input_tokens"], got["output_tokens"]) == (62, 16)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_new_work_is_no_loop_and_a_runaway_is_detected(shape: str) -> None:
    """Six polls of six jobs: no detection. Six polls of one job: warned, then the stop
    verdict reported (the processor cannot stop Strands)."""
    assert _run("six_jobs", shape)["detections"] == []
    runaway = _run("runaway", shape)
    assert runaway["detections"] == ["warn", "stop"]
    assert runaway["runs_ended"] == ["completed"]
