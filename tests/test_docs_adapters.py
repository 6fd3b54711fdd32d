"""The adapter pages' examples run as written (like the README's)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "adapters"


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


def _run(page: str, block: str) -> tuple[dict[str, object], str]:
    """Run one block on its own (as tests/test_docs.py does), capturing what it prints."""
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(DOCS / page), "exec"), namespace)
    return namespace, out.getvalue()


def test_the_langchain_page_runs_and_stops_its_runaway_loop() -> None:
    """The ReAct example answers and reports its run; the stop example ends with RunStopped."""
    from loopobs.adapters import RunStopped

    blocks = _blocks("langchain.md")
    assert len(blocks) == 2
    _, out = _run("langchain.md", blocks[0])
    assert out.splitlines() == ["1 + 2 = 3", "completed"]
    namespace, out = _run("langchain.md", blocks[1])
    assert isinstance(namespace["stopped"], RunStopped)
    assert 'stopped: the tool call pattern add({"a":1,"b":1}) repeated 3 times' in out
    assert out.rstrip().endswith("loop_detected")


def test_the_otel_page_runs() -> None:
    """The span example reports one run and counts its tool call in Prometheus."""
    blocks = _blocks("otel.md")
    assert len(blocks) == 2
    _, out = _run("otel.md", blocks[0])
    assert out.splitlines() == ["['on_run_end']", "1.0"]
    _run("otel.md", blocks[1])  # instruments the openai client into the processor, and undoes it
