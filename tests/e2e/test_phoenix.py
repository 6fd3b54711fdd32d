"""End to end: a real AgentLoop run exported over OTLP (HTTP and gRPC) into Arize Phoenix.

Phoenix starts once per session on free ports, with its working directory in a
temporary directory. Each test exports one scripted run (a failed model call
recovered by a fallback, a tool call, a final answer) under its own
``openinference.project.name``, reads the spans back through Phoenix's REST
API, and checks the tree against the one an in-memory exporter saw in the
same process: names, parent links, status codes and the key GenAI attributes.
Phoenix drops the OTel span kind and resource attributes, so those are not
compared (see ../shared/reference/backends.md §2).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from loopobs import AgentLoop, RateLimited, Usage, configure, tool
from loopobs.exporters import catalog as c
from loopobs.llm import Fail, Reply, ScriptedClient, ToolCall
from tests.e2e._backends import free_port, require_binary, wait_http_ok

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Phoenix:
    base_url: str
    grpc_port: int


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    binary = require_binary(
        "LOOPOBS_PHOENIX_BIN",
        "phoenix",
        os.path.expanduser("~/.cache/loopobs/phoenix-venv/bin/phoenix"),
    )
    http_port, grpc_port = free_port(), free_port()
    workdir: Path = tmp_path_factory.mktemp("phoenix")
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_LOG_MIGRATIONS": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
        # A small ingestion queue: past it Phoenix answers 503, so the bulk replay below
        # meets a receiver at capacity, as a busy collector would be.
        "PHOENIX_MAX_SPANS_QUEUE_SIZE": "1000",
    }
    for name in list(env):
        if name.startswith("OTEL_"):
            del env[name]
    log = (workdir / "phoenix.log").open("wb")
    proc = subprocess.Popen([binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{http_port}"
    try:
        wait_http_ok(f"{base}/healthz", 120.0)
        yield Phoenix(base, grpc_port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def export_run(phoenix: Phoenix, protocol: str, project: str) -> list[ReadableSpan]:
    """Run the scripted loop with configure() pointed at Phoenix; return what was exported."""
    endpoint = (
        phoenix.base_url if protocol == "http/protobuf" else f"http://127.0.0.1:{phoenix.grpc_port}"
    )
    local = InMemorySpanExporter()
    telemetry = configure(
        "loopobs-e2e",
        resource_attributes={"openinference.project.name": project},
        traces_exporter="otlp",
        metrics_exporter="none",
        protocol=protocol,
        endpoint=endpoint,
        span_exporters=[local],
        export_timeout_s=10.0,
    )
    client = ScriptedClient(
        [
            Fail(RateLimited("overloaded")),
            Reply(
                tool_calls=(ToolCall("add", {"a": 2, "b": 2}),),
                usage=Usage(input_tokens=120, output_tokens=15),
            ),
            Reply(text="2 + 2 = 4", usage=Usage(input_tokens=160, output_tokens=8)),
        ]
    )
    loop = AgentLoop(
        client,
        model="m1",
        fallback_models=["m2"],
        tools=[add],
        observers=telemetry.observers,
        agent_name="calc",
    )
    result = await loop.run("what is 2 + 2?")
    assert result.answer == "2 + 2 = 4"
    assert telemetry.shutdown(timeout_s=30.0)
    return list(local.get_finished_spans())


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Phoenix returns attributes nested by dots; flatten them back to dotted keys."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return out


def read_spans(phoenix: Phoenix, project: str, expected: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60.0
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{phoenix.base_url}/v1/projects/{project}/spans",
            params={"limit": max(100, expected)},
            timeout=10.0,
        )
        if response.status_code == 200:
            spans = response.json()["data"]
            if len(spans) >= expected:
                return spans
        time.sleep(0.25)
    pytest.fail(f"Phoenix has {len(spans)} of {expected} spans for {project}")


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_run_tree_arrives_in_phoenix(phoenix: Phoenix, protocol: str) -> None:
    project = f"loopobs-{protocol.split('/', maxsplit=1)[0]}-{uuid.uuid4().hex[:8]}"
    local = await export_run(phoenix, protocol, project)
    names = sorted(sp.name for sp in local)
    # turn 0: m1 fails, m2 (fallback) asks for the tool; turn 1 starts again from m1
    assert names == [
        "chat m1",
        "chat m1",
        "chat m2",
        "execute_tool add",
        "invoke_agent calc",
        "turn",
        "turn",
    ]

    remote = read_spans(phoenix, project, len(local))
    assert len(remote) == len(local)

    def key(span_id: int | None) -> str | None:
        return None if span_id is None else f"{span_id:016x}"

    local_by_id = {key(sp.context.span_id): sp for sp in local if sp.context is not None}
    remote_by_id = {sp["context"]["span_id"]: sp for sp in remote}
    assert set(remote_by_id) == set(local_by_id)
    trace_ids = {sp["context"]["trace_id"] for sp in remote}
    assert trace_ids == {f"{local[0].context.trace_id:032x}"}

    status_names = {StatusCode.UNSET: "UNSET", StatusCode.OK: "OK", StatusCode.ERROR: "ERROR"}
    for span_id, mine in local_by_id.items():
        theirs = remote_by_id[span_id]
        assert theirs["name"] == mine.name
        assert theirs["parent_id"] == key(mine.parent.span_id if mine.parent else None)
        assert theirs["status_code"] == status_names[mine.status.status_code], mine.name
        attrs = flatten(theirs["attributes"])
        for name in (
            c.GEN_AI_OPERATION_NAME,
            c.GEN_AI_REQUEST_MODEL,
            c.GEN_AI_TOOL_NAME,
            c.GEN_AI_USAGE_INPUT_TOKENS,
            c.GEN_AI_USAGE_OUTPUT_TOKENS,
            c.ERROR_TYPE,
            c.LOOPOBS_RUN_STATUS,
            c.LOOPOBS_TURN_INDEX,
            c.GEN_AI_AGENT_NAME,
        ):
            if name in (mine.attributes or {}):
                assert attrs.get(name) == (mine.attributes or {})[name], (mine.name, name)

    by_name: dict[str, list[dict[str, Any]]] = {}
    for sp in remote:
        by_name.setdefault(sp["name"], []).append(sp)
    (failed,) = [sp for sp in by_name["chat m1"] if sp["status_code"] == "ERROR"]
    assert flatten(failed["attributes"])[c.ERROR_TYPE] == "RateLimited"
    (run,) = by_name["invoke_agent calc"]
    assert run["parent_id"] is None
    assert run["status_code"] == "UNSET"
    assert flatten(run["attributes"])[c.GEN_AI_USAGE_INPUT_TOKENS] == 280
    assert [e["name"] for t in by_name["turn"] for e in t["events"]].count(c.EVENT_FALLBACK) == 1


def test_replayed_event_log_arrives_in_phoenix(phoenix: Phoenix, tmp_path: Path) -> None:
    """`loopobs replay FILE` over OTLP gives Phoenix the recorded runs' trees and timestamps."""
    import json
    import sys

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from loopobs.cli import main
    from loopobs.exporters.jsonl import replay
    from loopobs.exporters.tracing import TracingObserver

    log = tmp_path / "demo.jsonl"
    assert (
        main(
            [
                "demo",
                "--exit",
                "--metrics-port",
                "0",
                "--jsonl",
                str(log),
                "--no-live",
                "--quiet",
                "--latency",
                "0",
            ]
        )
        == 0
    )
    # what the same log gives in memory: the reference tree
    local = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(local))
    replay(log, TracingObserver(provider, propagate_context=False))
    expected = list(local.get_finished_spans())
    assert len(expected) > 40

    project = f"loopobs-replay-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.base_url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
        }
    )
    out = subprocess.run(
        [sys.executable, "-m", "loopobs.cli", "replay", str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    events = sum(1 for line in log.read_text().splitlines() if line.strip())
    assert f"replayed {events} events" in out.stdout

    remote = read_spans(phoenix, project, len(expected))
    assert sorted(sp["name"] for sp in remote) == sorted(sp.name for sp in expected)
    first_event_ns = json.loads(log.read_text().splitlines()[0])["time_ns"]
    roots = [sp for sp in expected if sp.parent is None]
    assert min(sp.start_time or 0 for sp in roots) == first_event_ns
    remote_roots = {sp["name"] for sp in remote if sp["parent_id"] is None}
    assert remote_roots == {sp.name for sp in roots}
    assert len({sp["context"]["trace_id"] for sp in remote}) == len(roots)


def count_spans(phoenix: Phoenix, project: str, expected: int) -> set[str]:
    """Every span id Phoenix holds for ``project``, polled until ``expected`` or no progress.

    Phoenix acknowledges a request before it inserts the spans, so this waits
    while the count grows, and gives up after 60 s without progress.
    """
    seen: set[str] = set()
    last_growth = time.monotonic()
    while True:
        ids: set[str] = set()
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            response = httpx.get(
                f"{phoenix.base_url}/v1/projects/{project}/spans", params=params, timeout=60.0
            )
            if response.status_code != 200:
                break
            body = response.json()
            ids.update(sp["context"]["span_id"] for sp in body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                break
        if len(ids) > len(seen):
            seen, last_growth = ids, time.monotonic()
        if len(seen) >= expected or time.monotonic() - last_growth > 60.0:
            return seen
        time.sleep(2.0)


def test_replay_of_100k_events_arrives_whole(phoenix: Phoenix, tmp_path: Path) -> None:
    """A 100k-event log replayed through a 512-span queue into a receiver that pushes back
    (503 at capacity): `loopobs replay` reports every span exported, and Phoenix holds each one.
    """
    import sys

    from tests._replay_logs import write_log

    log = tmp_path / "bulk.jsonl"
    # Streamed runs: 50 chunks per text or reasoning stream, 225 events and 8 spans a run.
    shape = write_log(log, 445, deltas=50)
    assert shape.events >= 100_000
    project = f"loopobs-bulk-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.base_url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_BSP_MAX_QUEUE_SIZE": "512",
        }
    )
    out = subprocess.run(
        [sys.executable, "-m", "loopobs.cli", "replay", str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"replayed {shape.events} events" in out.stdout
    assert f"{shape.spans} spans exported" in out.stdout

    received = count_spans(phoenix, project, shape.spans)
    assert len(received) == shape.spans
