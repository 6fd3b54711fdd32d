"""``loopobs.testing`` works where pytest is not installed; the fixtures load only under pytest.

Each check runs in a fresh interpreter in which pytest cannot be imported (a meta path finder
refuses ``pytest`` and ``_pytest``), as for a user who copies a docs example into a script.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.test_docs import BLOCKS, FRAMEWORK_PAGES

ROOT = Path(__file__).resolve().parents[1]

NO_PYTEST = textwrap.dedent("""\
    import importlib.abc
    import sys

    class _NoPytest(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pytest", "_pytest"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoPytest())
    """)

AFTER = "\nassert 'pytest' not in sys.modules and '_pytest' not in sys.modules\nprint('ok')\n"


def _run_without_pytest(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_PYTEST + code + AFTER],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_the_blocker_really_hides_pytest(tmp_path: Path) -> None:
    out = _run_without_pytest("import pytest", tmp_path)
    assert out.returncode != 0
    assert "No module named 'pytest'" in out.stderr


def test_recording_helpers_import_and_work_without_pytest(tmp_path: Path) -> None:
    code = textwrap.dedent("""\
        import asyncio

        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from loopobs import AgentLoop
        from loopobs.exporters import TracingObserver
        from loopobs.llm.scripted import ScriptedClient
        from loopobs.testing import (RecordingObserver, assert_contract, check_contract,
                                     metric_points, spans_by_name)

        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        recorder = RecordingObserver()
        loop = AgentLoop(ScriptedClient(["hello"]), model="scripted",
                         observers=[recorder, TracingObserver(provider)])
        asyncio.run(loop.run("hi"))
        assert check_contract(recorder.events) == []
        assert_contract(recorder.events)
        assert recorder.hooks()[0] == "on_run_start" and recorder.hooks()[-1] == "on_run_end"
        assert any(name.startswith("invoke_agent") for name in spans_by_name(spans))
        assert callable(metric_points)
        import loopobs.testing as t
        assert not hasattr(t, "recorder")  # no fixture without pytest
        """)
    out = _run_without_pytest(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


def test_docs_examples_using_the_recorder_run_without_pytest(tmp_path: Path) -> None:
    """Every docs code block that uses ``loopobs.testing`` runs in a script without pytest."""
    blocks = [
        (page, line, code)
        for page, line, code in BLOCKS
        if "loopobs.testing" in code and page not in FRAMEWORK_PAGES
    ]
    assert len(blocks) >= 5
    for page, line, code in blocks:
        out = _run_without_pytest(code, tmp_path)
        assert out.returncode == 0, f"{page}:{line}\n{out.stderr[-2000:]}"


def test_importing_the_plugin_module_under_pytest_gives_the_fixtures() -> None:
    """Metadata written before the split names ``loopobs.testing`` as the plugin: it still works."""
    import loopobs.testing as t
    from loopobs import pytest_plugin

    assert t.recorder is pytest_plugin.recorder  # type: ignore[attr-defined]
    assert t.tracer_provider is pytest_plugin.tracer_provider  # type: ignore[attr-defined]
