"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_emit_by_hand_example_runs() -> None:
    """The 'loop that is not ours' example executes and records exactly the events it emits."""
    blocks = [b for b in _python_blocks() if "observers.on_run_start(" in b]
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    recorder = namespace["recorder"]
    assert [h for h, _ in recorder.events] == [  # type: ignore[attr-defined]
        "on_run_start",
        "on_tool_pre",
        "on_tool_post",
        "on_run_end",
    ]


def test_two_setup_commands() -> None:
    """The README keeps exactly two set-up commands: the demo and the tests."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Two commands", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^(make \w+)", section, re.M)
    assert commands == ["make demo", "make test"]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci


def test_every_python_block_compiles_and_the_observer_example_works() -> None:
    """Every README code block is valid Python; the observer example reports slow tools."""
    import contextlib
    import io
    import uuid

    from loopobs import ToolPostContext

    blocks = _python_blocks()
    assert len(blocks) >= 3
    for block in blocks:
        compile(block, str(README), "exec")
    (example,) = [b for b in blocks if "class SlowTools" in b]
    namespace: dict[str, object] = {}
    exec(compile(example, str(README), "exec"), namespace)
    observer = namespace["SlowTools"]()  # type: ignore[operator]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for ms in (5.0, 1500.0):
            observer.on_tool_post(
                ToolPostContext(
                    run_id=uuid.uuid4(),
                    time_ns=0,
                    tool_call_id="c",
                    turn=0,
                    tool="search",
                    duration_ms=ms,
                )
            )
    assert out.getvalue().startswith("search took 1500 ms")


def test_observe_a_loop_example_without_any_server_shows_the_error(tmp_path: Path) -> None:
    """No model server, no collector: the example prints the run's error, and configure()
    says once that nothing is exported instead of retrying an endpoint nobody named."""
    import os
    import subprocess
    import sys

    from tests.e2e._backends import free_port

    (block,) = [b for b in _python_blocks() if "loopobs.configure(" in b and "AgentLoop(" in b]
    assert "127.0.0.1:8000" in block
    assert "9464" in block
    code = block.replace("127.0.0.1:8000", f"127.0.0.1:{free_port()}").replace("9464", "0")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "OPENAI_", "PROMETHEUS_MULTIPROC"))
    }
    env["PYTHONPATH"] = str(README.parent)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    status, _, rest = out.stdout.strip().partition(" ")
    assert status == "failed"
    assert not rest.startswith("None"), out.stdout
    assert "all models failed" in rest or "connect" in rest.lower(), out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "no OTLP endpoint configured" in lines[0]


def test_layout_names_every_module() -> None:
    """The Layout section names every module of the layers below the faces, and every folder."""
    text = README.read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[a-z_]+", layout))
    package = README.parent / "loopobs"
    for folder in ("contract", "cost", "detectors", "loop", "sessions", "exporters", "mcp"):
        modules = {p.stem for p in (package / folder).glob("*.py") if not p.stem.startswith("_")}
        # trace_links is a deprecated alias in the exporters; it lives in the contract
        missing = modules - words - ({"trace_links"} if folder == "exporters" else set())
        assert missing == set(), f"loopobs/{folder}: {sorted(missing)}"
    folders = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    for folder in folders:
        assert f"loopobs/{folder}/" in layout
