"""``import loopobs`` stays light: exporters, the OTel SDK, jsonschema, pydantic load when used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOT_AT_IMPORT = (
    "loopobs.exporters",
    "opentelemetry",
    "jsonschema",
    "referencing",
    "prometheus_client",
    "pydantic",
    "pydantic_core",
)


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in NOT_AT_IMPORT))


def test_import_loopobs_loads_no_exporter_sdk_jsonschema_or_pydantic() -> None:
    loaded = _loaded_after("import loopobs")
    assert _heavy(loaded) == []
    assert "loopobs.detectors" not in loaded  # an AgentLoop loads them, when built


def test_lazily_exported_names_resolve_and_are_listed() -> None:
    code = (
        "import loopobs, loopobs.detectors as d\n"
        "lazy = ['ConvergenceDetector', 'Normaliser', 'RepetitionDetector',\n"
        "        'ToolNormalisation', 'Checkpoint', 'ParkedCall', 'configure']\n"
        "assert set(lazy) <= set(dir(loopobs)) and set(lazy) <= set(loopobs.__all__)\n"
        "assert loopobs.RepetitionDetector is d.RepetitionDetector\n"
        "from loopobs import ConvergenceDetector, Normaliser, ToolNormalisation\n"
        "assert (ConvergenceDetector, Normaliser, ToolNormalisation) == (\n"
        "    d.ConvergenceDetector, d.Normaliser, d.ToolNormalisation)\n"
    )
    _loaded_after(code)


def test_running_a_loop_without_exporters_stays_light() -> None:
    code = (
        "import asyncio, loopobs\n"
        "from loopobs.llm import Reply, ScriptedClient\n"
        "loop = loopobs.AgentLoop(ScriptedClient([Reply(text='hi')]), model='m')\n"
        "assert asyncio.run(loop.run('go')).ok\n"
    )
    assert _heavy(_loaded_after(code)) == []


def test_resuming_with_an_input_schema_loads_jsonschema_then() -> None:
    code = (
        "from loopobs.loop.parking import _schema_errors\n"
        "assert _schema_errors({'type': 'boolean'}, 1)\n"
    )
    assert "jsonschema" in _loaded_after(code)


def test_checkpoint_classes_load_pydantic_when_first_used() -> None:
    """The lazily exported names are listed, resolve to the same classes, and type hints
    that name them resolve once they are loaded."""
    code = (
        "import sys, typing, loopobs, loopobs.loop.run as run\n"
        "assert {'Checkpoint', 'ParkedCall'} <= set(dir(loopobs)) & set(dir(run))\n"
        "assert 'pydantic' not in sys.modules\n"
        "from loopobs import Checkpoint, ParkedCall\n"
        "import pydantic\n"
        "assert issubclass(Checkpoint, pydantic.BaseModel)\n"
        "assert run.Checkpoint is Checkpoint and run.ParkedCall is ParkedCall\n"
        "assert loopobs.Checkpoint is Checkpoint\n"
        "hint = typing.get_type_hints(loopobs.RunResult)['checkpoint']\n"
        "assert hint == Checkpoint | None, hint\n"
        "hint = typing.get_type_hints(loopobs.AgentLoop.resume)['checkpoint']\n"
        "assert hint is Checkpoint, hint\n"
        "from loopobs.loop import driver, parking\n"
        "assert typing.get_type_hints(parking.check_resume)['checkpoint'] is Checkpoint\n"
        "hint = typing.get_type_hints(driver.RunDriver.execute)['checkpoint']\n"
        "assert hint == Checkpoint | None, hint\n"
    )
    assert "pydantic" in _loaded_after(code)


def test_the_ask_user_tool_is_built_on_first_use() -> None:
    code = (
        "import sys, loopobs.sessions.session as s\n"
        "assert 'ASK_USER' in dir(s) and 'pydantic' not in sys.modules\n"
        "assert s.ASK_USER is s.ASK_USER and s.ASK_USER.name == 'ask_user'\n"
    )
    assert "pydantic" in _loaded_after(code)
