"""``loopobs demo --framework langgraph``: a LangGraph ReAct agent watched through the adapter.

Offline: the model is LangChain's ``GenericFakeChatModel`` playing a script. Three
runs per round: a research question answered with two tools, a tool that fails
(the ``ToolNode`` hands the error back to the model), and a runaway loop polling
the same job, stopped by the repetition detector (``RunStopped`` raised into the
graph, caught here and reported).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

from loopobs.adapters.langchain import LoopobsCallbackHandler
from loopobs.contract.errors import LoopDetected
from loopobs.contract.observer import LoopObserver
from loopobs.detectors import ConvergenceDetector, RepetitionDetector

try:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
except ModuleNotFoundError as exc:  # pragma: no cover - the adapter import fails first
    from loopobs.adapters._extras import missing_extra

    raise missing_extra("langchain", "langgraph", "langchain", exc) from exc

__all__ = ["play"]


@tool
def search(query: str) -> str:
    """Search the travel guide."""
    return f"3 results for {query!r}: Lisbon trams, Porto wine cellars, Sintra palaces"


@tool
def exchange_rate(base: str, quote: str) -> str:
    """The exchange rate between two currencies."""
    return "0.92" if (base, quote) == ("USD", "EUR") else "1.0"


@tool
def booking_status(booking: str) -> str:
    """The status of a booking (this one never leaves the queue)."""
    if booking == "broken":
        raise ValueError("the booking service is down")
    return "queued"


def _ai(
    rng: random.Random,
    text: str = "",
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
    ids: Iterator[int] | None = None,
) -> AIMessage:
    counter = ids or itertools.count()
    base_in, base_out = rng.randint(300, 900), rng.randint(20, 120)
    return AIMessage(
        content=text,
        tool_calls=[
            {"name": n, "args": a, "id": f"call_{next(counter)}", "type": "tool_call"}
            for n, a in calls
        ],
        usage_metadata={
            "input_tokens": base_in,
            "output_tokens": base_out,
            "total_tokens": base_in + base_out,
        },
        response_metadata={"model_name": "fake-gpt"},
    )


def _graph(answers: Iterator[AIMessage]) -> Any:
    model = GenericFakeChatModel(messages=answers)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", RunnableLambda(agent))
    graph.add_node(
        "tools", ToolNode([search, exchange_rate, booking_status], handle_tool_errors=True)
    )
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile()


async def play(
    observers: Sequence[LoopObserver], rng: random.Random, rounds: int, write: Any = print
) -> None:
    """Run the three LangGraph scenarios ``rounds`` times into ``observers``."""
    handler = LoopobsCallbackHandler(
        observers,
        agent="langgraph-travel",
        detectors=[RepetitionDetector(warn_after=3, stop_after=5), ConvergenceDetector()],
    )
    config: Any = {"callbacks": [handler], "recursion_limit": 100}
    for _ in range(rounds):
        ids = itertools.count()
        research = iter(
            [
                _ai(
                    rng,
                    calls=[
                        ("search", {"query": "Portugal in spring"}),
                        ("exchange_rate", {"base": "USD", "quote": "EUR"}),
                    ],
                    ids=ids,
                ),
                _ai(rng, "Lisbon and Porto; 1 USD is 0.92 EUR."),
            ]
        )
        await _graph(research).ainvoke(
            {"messages": [("user", "Plan a week in Portugal")]}, config=config
        )
        failing = iter(
            [
                _ai(rng, calls=[("booking_status", {"booking": "broken"})], ids=ids),
                _ai(rng, "The booking service is down; try again later."),
            ]
        )
        await _graph(failing).ainvoke(
            {"messages": [("user", "Is my booking done?")]}, config=config
        )
        polling = (
            _ai(rng, calls=[("booking_status", {"booking": "B-42"})], ids=ids)
            for _ in itertools.count()
        )
        try:
            await _graph(polling).ainvoke(
                {"messages": [("user", "Wait for booking B-42")]}, config=config
            )
        except LoopDetected as stop:
            write(f"loopobs demo (langgraph): the graph was stopped: {stop}")
