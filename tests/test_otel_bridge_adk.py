"""The span bridge on Google ADK's own spans: a real ADK agent in its own venv.

ADK (verified against 2.13.0) caps OpenTelemetry at 1.44, so it runs in the venv that
``make bridge-venvs`` builds; ``tests/_adk_app.py`` drives an ``LlmAgent`` through ADK's
own model interface (a ``BaseLlm`` answering from a script, offline) and prints what the
processor reported. ADK sets its agent span's attributes just after it starts, so with
``group_by="agent"`` the bridge reported no run at all; both of its schemas are run: the
default (semconv-aligned: ``invoke_workflow`` → ``invoke_agent`` → ``generate_content`` /
``execute_tool``, content off unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``)
and the legacy one (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``: content in
``gcp.vertex.agent.*`` attributes, on unless ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false``).
ADK 1.x (verified against 1.14.1, what pip picks beside OpenTelemetry 1.45) runs in a venv
of its own too: its spans are ``invocation`` → ``agent_run [NAME]`` (no attributes) →
``call_llm`` (no operation name) → ``execute_tool``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests._bridge_app import installed_version, run_app, venv_python

VERIFIED_ADK = "2.13.0"
SCHEMAS = {"aligned": "", "legacy": "1"}

pytestmark = pytest.mark.slow  # each test runs a framework in a subprocess

_NO_ADK2 = pytest.mark.skipif(
    not venv_python("adk").exists() and not os.environ.get("CI"),
    reason="ADK's venv is not built (make bridge-venvs)",
)


def _run(scenario: str, schema: str, *flags: str, **env: str) -> dict[str, Any]:
    if not venv_python("adk").exists() and not os.environ.get("CI"):
        pytest.skip("ADK's venv is not built (make bridge-venvs)")
    return run_app(
        "adk",
        "_adk_app.py",
        scenario,
        *flags,
        ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=SCHEMAS[schema],
        **env,
    )


@_NO_ADK2
def test_the_venv_has_the_verified_adk_release() -> None:
    assert installed_version("adk", "google-adk") == VERIFIED_ADK


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
@pytest.mark.parametrize("group_by", ["agent", "trace"])
def test_an_adk_agent_is_one_named_run_with_exact_usage(schema: str, group_by: str) -> None:
    got = _run("productive", schema, "--group-by", group_by)
    assert got["answer"] == "3 and 7"
    assert got["agents"] == ["calc"]
    assert got["sessions"] == 1
    assert got["runs_ended"] == ["completed"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (12 + 20 + 30, 7 + 5 + 4)
    assert got["tools"] == ["add", "add"]
    assert got["detections"] == []
    assert got["open_runs"] == 0


@pytest.mark.parametrize(
    ("schema", "content"),
    [
        ("aligned", {}),  # the default: no content
        ("legacy", {"ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false"}),  # placeholders only
    ],
)
def test_content_off_new_work_is_no_loop(schema: str, content: dict[str, str]) -> None:
    """Six polls of six jobs with content off: no detection (the tool name alone is no
    evidence; ADK's "{}" / "N/A" placeholders are no content). A runaway is then not
    detected either: there is nothing to tell the calls apart by."""
    got = _run("six_jobs", schema, **content)
    assert got["tools"] == ["poll"] * 6
    assert got["results"] == [None] * 6
    assert got["detections"] == []


@pytest.mark.parametrize(
    ("schema", "content"),
    [
        ("aligned", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}),
        ("legacy", {}),  # the legacy schema records content by default
    ],
)
def test_content_on_a_runaway_is_detected_and_new_work_is_not(
    schema: str, content: dict[str, str]
) -> None:
    runaway = _run("runaway", schema, **content)
    assert runaway["arguments"] == [{"job": "42"}] * 6  # each call received once
    assert runaway["detections"] == ["warn", "stop"]
    assert _run("six_jobs", schema, **content)["detections"] == []


# -- ADK 1.x: what pip installs beside OpenTelemetry 1.45 -------------------------------------

VERIFIED_ADK1 = "1.14.1"


def _run1(scenario: str, *flags: str) -> dict[str, Any]:
    if not venv_python("adk1").exists() and not os.environ.get("CI"):
        pytest.skip("ADK 1.x's venv is not built (make bridge-venvs)")
    return run_app("adk1", "_adk_app.py", scenario, *flags)


def test_the_adk1_venv_has_the_verified_release() -> None:
    if not venv_python("adk1").exists() and not os.environ.get("CI"):
        pytest.skip("ADK 1.x's venv is not built (make bridge-venvs)")
    assert installed_version("adk1", "google-adk") == VERIFIED_ADK1


@pytest.mark.parametrize("group_by", ["agent", "trace"])
def test_adk1_agent_run_and_call_llm_spans_are_one_named_run(group_by: str) -> None:
    """ADK 1.x: ``agent_run [calc]`` (no attributes at all) holding ``call_llm`` (no
    operation name) and ``execute_tool`` spans; the bridge saw no model call in them."""
    got = _run1("productive", "--group-by", group_by)
    assert got["agents"] == ["calc"]
    assert got["model_calls"] == got["served"] == 3
    assert (got["input_tokens"], got["output_tokens"]) == (62, 16)
    assert got["tools"] == ["add", "add"]
    assert got["arguments"] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert got["detections"] == []
    assert got["open_runs"] == 0


def test_adk1_a_runaway_is_detected_and_new_work_is_not() -> None:
    assert _run1("runaway")["detections"] == ["warn", "stop"]
    assert _run1("six_jobs")["detections"] == []
