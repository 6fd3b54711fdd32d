"""What the span bridge reported, as one JSON line: shared by the framework apps that run
in venvs of their own (``tests/_strands_app.py``, ``tests/_adk_app.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from loopobs import Budget, BudgetGuard, LoopObserver, RepetitionDetector
from loopobs.adapters.otel import GenAISpanProcessor
from loopobs.testing import RecordingObserver, assert_contract


class Bridge:
    """A processor with a recorder, on a fresh provider made the global one (the frameworks'
    tracers write to the global provider)."""

    def __init__(
        self, group_by: str = "agent", *, stop_after: int = 5, budget_tokens: int | None = None
    ) -> None:
        self.recorder = RecordingObserver()
        detectors: list[LoopObserver] = [
            RepetitionDetector(warn_after=min(3, stop_after), stop_after=stop_after)
        ]
        if budget_tokens is not None:  # a run may use at most this many tokens
            detectors.append(BudgetGuard(Budget(total_tokens=budget_tokens)))
        self.processor = GenAISpanProcessor(
            [self.recorder],
            group_by="trace" if group_by == "trace" else "agent",
            detectors=detectors,
        )
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        trace.set_tracer_provider(self.provider)

    def summary(self, **extra: Any) -> str:
        self.provider.shutdown()
        recorder = self.recorder
        assert_contract(recorder.events)
        return json.dumps(
            {
                **extra,
                "agents": [c.agent for c in recorder.of("on_run_start")],
                "sessions": len({c.session_id for c in recorder.of("on_run_start")}),
                "runs_ended": [c.status for c in recorder.of("on_run_end")],
                "model_calls": len(recorder.of("on_stream_success")),
                "input_tokens": sum(c.input_tokens for c in recorder.of("on_run_end")),
                "output_tokens": sum(c.output_tokens for c in recorder.of("on_run_end")),
                "tools": [c.tool for c in recorder.of("on_tool_post")],
                "arguments": [dict(c.input) for c in recorder.of("on_tool_call_received")],
                "results": [c.result for c in recorder.of("on_tool_post")],
                "detections": [d.action for d in recorder.of("on_loop_detected")],
                "budget_verdicts": [b.action for b in recorder.of("on_budget_exceeded")],
                "open_runs": self.processor.open_runs,
                "skipped_attributes": self.processor.skipped_attributes,
            }
        )


ROOT = Path(__file__).resolve().parents[1]


def venv_python(name: str) -> Path:
    """The python of a framework's venv that ``make bridge-venvs`` builds."""
    return ROOT / "build" / "bridge-venvs" / name / "bin" / "python"


def run_app(venv: str, app: str, *args: str, **env: str) -> dict[str, Any]:
    """Run ``tests/<app>`` in ``venv`` with the repository on ``PYTHONPATH``; its summary."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"):
        environ.pop(name, None)
    done = subprocess.run(
        [str(venv_python(venv)), str(ROOT / "tests" / app), *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def installed_version(venv: str, distribution: str) -> str:
    out = subprocess.run(
        [
            str(venv_python(venv)),
            "-c",
            "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
            distribution,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return out.strip()
