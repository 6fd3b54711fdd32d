"""Framework adapters: what a run costs with and without the adapter feeding a no-op observer.

Run: ``.venv/bin/python bench/bench_adapters.py`` (``--quick``: fewer rounds).

- LangGraph: a ReAct graph (LangChain's ``GenericFakeChatModel``, a ``ToolNode``)
  runs 10 tool-calling turns and an answer, ``invoke()`` timed bare, with a no-op
  LangChain callback handler (what any callback costs), and with
  ``LoopobsCallbackHandler`` feeding one observer that listens to every hook and
  does nothing (no detectors; then with the default detectors).
- OpenTelemetry: an app writes an ``invoke_agent`` span with 10 ``chat`` and 10
  ``execute_tool`` children into an SDK ``TracerProvider``, timed with no
  processor, with a ``SimpleSpanProcessor`` into an exporter that discards (the
  least an app exporting spans pays), and with ``GenAISpanProcessor`` feeding the
  same no-op observer.

Rounds are interleaved and the best of each is kept; the ratio is against the bare
run measured in the same process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import fmt_ns, fmt_ratio, print_table
from loopobs import EventContext
from loopobs.contract.observer import EventSink

__all__ = ["main"]

TURNS = 10


class NoOp(EventSink):
    """Listens to every hook (so every context is built) and does nothing."""

    def on_event(self, ctx: EventContext) -> None:
        pass


def _best(fns: dict[str, Callable[[], object]], rounds: int, per_round: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()  # warm
            start = time.perf_counter()
            for _ in range(per_round):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / per_round)
    return best


def langgraph_runs(rounds: int, per_round: int) -> dict[str, float]:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from loopobs.adapters.langchain import LoopobsCallbackHandler

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    def script() -> list[AIMessage]:
        usage: Any = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        calls = [
            AIMessage(
                content="",
                usage_metadata=usage,
                tool_calls=[
                    {"name": "lookup", "args": {"key": f"k{i}"}, "id": f"c{i}", "type": "tool_call"}
                ],
            )
            for i in range(TURNS)
        ]
        return [*calls, AIMessage(content="done", usage_metadata=usage)]

    def graph() -> Any:
        model = GenericFakeChatModel(messages=iter(script()))

        def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        g = StateGraph(MessagesState)
        g.add_node("agent", RunnableLambda(agent))
        g.add_node("tools", ToolNode([lookup]))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition, ["tools", END])
        g.add_edge("tools", "agent")
        return g.compile()

    class Nothing(BaseCallbackHandler):
        pass

    handlers: dict[str, Any] = {
        "bare": None,
        "no-op LangChain handler": Nothing(),
        "LoopobsCallbackHandler + no-op observer": LoopobsCallbackHandler([NoOp()], detectors=[]),
        "LoopobsCallbackHandler + no-op observer + default detectors": LoopobsCallbackHandler(
            [NoOp()]
        ),
    }

    def run(handler: Any) -> Callable[[], object]:
        config: Any = {"callbacks": [handler]} if handler is not None else {}
        return lambda: graph().invoke({"messages": [("user", "go")]}, config=config)

    return _best({name: run(h) for name, h in handlers.items()}, rounds, per_round)


def otel_runs(rounds: int, per_round: int) -> dict[str, float]:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from loopobs.adapters.otel import GenAISpanProcessor

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    bare = TracerProvider()
    exporting = TracerProvider()
    exporting.add_span_processor(SimpleSpanProcessor(Discard()))
    fed = TracerProvider()
    fed.add_span_processor(GenAISpanProcessor([NoOp()], detectors=[]))

    def app(provider: TracerProvider) -> Callable[[], object]:
        tracer = provider.get_tracer("app")

        def run() -> None:
            with tracer.start_as_current_span(
                "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
            ):
                for i in range(TURNS):
                    with tracer.start_as_current_span(
                        "chat m",
                        attributes={
                            "gen_ai.operation.name": "chat",
                            "gen_ai.request.model": "m",
                            "gen_ai.usage.input_tokens": 10,
                            "gen_ai.usage.output_tokens": 5,
                        },
                    ):
                        pass
                    with tracer.start_as_current_span(
                        "execute_tool t",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "t",
                            "gen_ai.tool.call.id": f"c{i}",
                        },
                    ):
                        pass

        return run

    return _best(
        {
            "bare": app(bare),
            "SimpleSpanProcessor into a discarding exporter": app(exporting),
            "GenAISpanProcessor + no-op observer": app(fed),
        },
        rounds,
        per_round,
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark, print the table, return the rows (for bench/run_all.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    rounds, per_round = (2, 3) if args.quick else (7, 10)
    rows: list[dict[str, Any]] = []
    for title, results in (
        (f"LangGraph ReAct run ({TURNS} tool turns)", langgraph_runs(rounds, per_round)),
        (
            f"OTel app run (1 agent, {TURNS} chat + {TURNS} tool spans)",
            otel_runs(rounds, per_round * 10),
        ),
    ):
        bare = results["bare"]
        for name, seconds in results.items():
            rows.append(
                {"name": f"{title}: {name}", "best_ns": seconds * 1e9, "baseline_ns": bare * 1e9}
            )
    print_table(
        ["benchmark", "best", "vs bare"],
        [
            [r["name"], fmt_ns(r["best_ns"]), fmt_ratio(r["best_ns"], r["baseline_ns"])]
            for r in rows
        ],
    )
    return rows


if __name__ == "__main__":
    main()
