"""``import loopobs`` stays light: exporters, the OTel SDK, jsonschema, pydantic load when used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOT_AT_IMPORT = ("loopobs.exporters", "opentelemetry", "jsonschema", "referencing",
                 "prometheus_client", "pydantic", "pydantic_core")


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules
                  if any(m == h or m.startswith(h + ".") for h in NOT_AT_IMPORT))


def test_import_loopobs_loads_no_exporter_sdk_jsonschema_or_pydantic() -> None:
    assert _heavy(_loaded_after("import loopobs")) == []


def test_running_a_loop_without_exporters_stays_light() -> None:
    code = ("import asyncio, loopobs\n"
            "from loopobs.llm import Reply, ScriptedClient\n"
            "loop = loopobs.AgentLoop(ScriptedClient([Reply(text='hi')]), model='m')\n"
            "assert asyncio.run(loop.run('go')).ok\n")
    assert _heavy(_loaded_after(code)) == []


def test_resuming_with_an_input_schema_loads_jsonschema_then() -> None:
    code = ("from loopobs.core.parking import _schema_errors\n"
            "assert _schema_errors({'type': 'boolean'}, 1)\n")
    assert "jsonschema" in _loaded_after(code)
