"""What the root span tells a Collector's tail sampling, and who the run was for."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop, Budget, Conversation, ModelRates, RunStatus, Usage, tool
from loopobs.detectors import RepetitionDetector
from loopobs.exporters import catalog as c
from loopobs.exporters.tracing import TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall


def _root(exporter: InMemorySpanExporter) -> dict[str, object]:
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    return dict(root.attributes or {})


@tool
def ping(host: str) -> str:
    """Ping a host."""
    return "no answer"


async def test_a_looping_run_says_so_on_its_root(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    same = Reply(tool_calls=(ToolCall("ping", {"host": "a"}),))
    loop = AgentLoop(
        ScriptedClient([same] * 12 + [Reply(text="gave up")]),
        model="m",
        tools=[ping],
        observers=[TracingObserver(tracer_provider)],
        detectors=[RepetitionDetector(warn_after=2, stop_after=100)],
    )
    result = await loop.run(
        "ping a", session=Conversation(attribution={"tenant": "acme", "user": "u-9"})
    )
    assert result.status is RunStatus.LOOP_DETECTED
    root = _root(span_exporter)
    assert root[c.LOOPOBS_RUN_LOOP_DETECTED] is True
    assert root[c.LOOPOBS_RUN_BUDGET_STOPPED] is False
    assert root["loopobs.attribution.tenant"] == "acme"
    assert root[c.USER_ID] == "u-9"


async def test_a_budget_stop_says_so_on_its_root(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    reply = Reply(
        text="",
        tool_calls=(ToolCall("ping", {"host": "a"}),),
        usage=Usage(input_tokens=10, output_tokens=10),
    )
    loop = AgentLoop(
        ScriptedClient([reply] * 5),
        model="m",
        tools=[ping],
        detectors=[],
        observers=[TracingObserver(tracer_provider)],
        budget=Budget(model_calls=2),
        prices={"m": ModelRates(input_per_mtok=1.0, output_per_mtok=1.0)},
    )
    result = await loop.run("ping")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    root = _root(span_exporter)
    assert root[c.LOOPOBS_RUN_BUDGET_STOPPED] is True
    assert root[c.LOOPOBS_RUN_LOOP_DETECTED] is False
    assert c.USER_ID not in root
