"""The documented 'emit from a loop that is not ours' example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from loopobs import ObserverSet
from loopobs.testing import RecordingObserver
from tests._ast import compile_source

# The integrator will paste the example into README.md and point this at it.
DOC = Path(__file__).resolve().parents[1] / "docs" / "emit-by-hand.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, f"{DOC} must hold exactly one python example"
    return str(blocks[0])


def test_example_records_one_well_formed_run() -> None:
    """Executing the example delivers each event once, in order, for one run and session."""
    namespace: dict[str, object] = {"__name__": "emit_by_hand_example"}
    exec(compile_source(_example(), str(DOC)), namespace)
    recorder, observers = namespace["recorder"], namespace["observers"]
    assert isinstance(recorder, RecordingObserver)
    assert isinstance(observers, ObserverSet)
    assert recorder.hooks() == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_tool_pre",
        "on_tool_post",
        "on_turn_end",
        "on_run_end",
    ]
    assert recorder.run_ids() == [namespace["run_id"]]
    times = [ctx.time_ns for _, ctx in recorder.events]
    assert times == sorted(times)
    (start,) = recorder.of("on_run_start")
    assert start.session_id == namespace["session_id"]
    (pre,), (post,) = recorder.of("on_tool_pre"), recorder.of("on_tool_post")
    assert (pre.tool_call_id, pre.attempt) == (post.tool_call_id, post.attempt)
    assert observers.failure_count == 0


def test_example_runs_under_strict_mode() -> None:
    """The example's events are valid for strict observers too (nothing raised and hidden)."""
    code = _example().replace("ObserverSet([recorder])", "ObserverSet([recorder], strict=True)")
    assert "strict=True" in code
    namespace: dict[str, object] = {"__name__": "emit_by_hand_example"}
    exec(compile_source(code, str(DOC)), namespace)
    recorder = namespace["recorder"]
    assert isinstance(recorder, RecordingObserver)
    assert len(recorder.events) == 8
