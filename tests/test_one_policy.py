"""One stop policy and one budget path: the same runaway through AgentLoop and a LangGraph graph.

The loop and the LangChain adapter (on a real LangGraph ReAct graph) must reach the
same verdicts, stop at the same call with the same status, and say the same thing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.tools import tool as lc_tool
from langgraph.graph import END, START, MessagesState, StateGraph

from loopobs import AgentLoop, Budget, BudgetGuard, RepetitionDetector
from loopobs import tool as loopobs_tool
from loopobs.adapters import RunStopped
from loopobs.adapters.langchain import LoopobsCallbackHandler
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.loop.policy import RunPolicy, decide
from loopobs.testing import RecordingObserver, assert_contract
from tests._langgraph_app import ai, fake_model, react_graph

CALLS = 12


@loopobs_tool
def poll(job: str) -> str:
    """Poll a job that never finishes."""
    return "queued"


@lc_tool("poll")
def lc_poll(job: str) -> str:
    """Poll a job that never finishes."""
    return "queued"


def job(i: int, same: bool) -> str:
    return "j1" if same else f"j{i}"


async def through_the_loop(same: bool, **kwargs: Any) -> tuple[RecordingObserver, Any]:
    rec = RecordingObserver()
    steps = [
        Reply(tool_calls=(ToolCall("poll", {"job": job(i, same)}, id=f"c{i}"),))
        for i in range(CALLS)
    ]
    loop = AgentLoop(
        ScriptedClient(steps), model="fake-model", tools=[poll], observers=[rec], **kwargs
    )
    result = await loop.run("wait for it")
    return rec, result.error


def through_the_graph(same: bool, **kwargs: Any) -> tuple[RecordingObserver, Any]:
    rec = RecordingObserver()
    handler = LoopobsCallbackHandler([rec], **kwargs)
    model = fake_model([ai(calls=[("poll", {"job": job(i, same)}, f"c{i}")]) for i in range(CALLS)])
    with pytest.raises(RunStopped) as raised:
        react_graph(model, [lc_poll]).invoke(
            {"messages": [("user", "wait for it")]},
            config={"callbacks": [handler], "recursion_limit": 100},
        )
    return rec, raised.value


def what_happened(rec: RecordingObserver) -> dict[str, Any]:
    end = rec.of("on_run_end")[0]
    return {
        "loops": [(v.pattern, v.repetitions, v.tool, v.action) for v in rec.of("on_loop_detected")],
        "budgets": [
            (v.limit, v.value, v.budget, v.scope, v.action) for v in rec.of("on_budget_exceeded")
        ],
        "model_calls": len(rec.of("on_stream_start")),
        "tool_calls": len(rec.of("on_tool_post")),
        "status": end.status,
        "error": str(end.error),
    }


async def test_a_runaway_tool_loop_stops_the_same_way_in_the_loop_and_the_graph() -> None:
    """Default repetition detection: same verdicts, same stop, same message."""
    loop_rec, loop_error = await through_the_loop(same=True)
    graph_rec, raised = through_the_graph(same=True)
    mine, theirs = what_happened(loop_rec), what_happened(graph_rec)
    assert mine == theirs
    assert mine["status"] == "loop_detected"
    assert [a for *_, a in mine["loops"]][-1] == "stop"
    assert str(loop_error) == str(raised) == mine["error"]
    assert raised.status == "loop_detected"
    assert_contract(loop_rec.events)
    assert_contract(graph_rec.events)


@pytest.mark.parametrize(
    "budget", [Budget(model_calls=3), Budget(tool_calls=2), Budget(model_calls=5, warn_at=0.5)]
)
async def test_a_budget_overrun_stops_the_same_way_in_the_loop_and_the_graph(
    budget: Budget,
) -> None:
    """The loop's budget and a BudgetGuard on the graph: same verdicts, same stop, same text."""
    loop_rec, loop_error = await through_the_loop(same=False, budget=budget, detectors=[])
    graph_rec, raised = through_the_graph(same=False, detectors=[BudgetGuard(budget)])
    mine, theirs = what_happened(loop_rec), what_happened(graph_rec)
    assert mine == theirs
    assert mine["status"] == "budget_exceeded"
    assert mine["budgets"][-1][-1] == "stop"
    assert str(loop_error) == str(raised) == mine["error"]
    assert raised.status == "budget_exceeded"
    assert_contract(loop_rec.events)
    assert_contract(graph_rec.events)


def test_the_adapters_policy_is_the_loops() -> None:
    """StopPolicy decides with the loop's decide(): a new action is taught once."""
    from loopobs.adapters import StopPolicy

    assert issubclass(StopPolicy, RunPolicy)
    assert decide.__module__ == "loopobs.loop.policy"


# -- item 17: parallel branches of one graph run share its budget -----------------------------


BRANCHES = 4


def test_parallel_branches_share_the_graph_runs_budget() -> None:
    """One branch's model call is in flight while the others call theirs (each a branch
    run): under Budget(model_calls=3), the fourth and later calls of the graph run are
    refused, whichever branch makes them, and the graph run ends stopped."""
    held, done = threading.Event(), threading.Event()
    order = threading.Lock()
    refused: list[RunStopped] = []
    finished = [0]

    class Held(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            held.set()
            assert done.wait(10), "the other branches never finished"
            return super()._generate(*args, **kwargs)

    def holder(state: MessagesState) -> dict[str, Any]:
        model = Held(messages=iter([ai("held", usage=(5, 1))]))
        return {"messages": [model.invoke(state["messages"])]}

    def branch(name: str) -> Any:
        model = GenericFakeChatModel(messages=iter([ai(f"{name} done", usage=(5, 1))]))

        def node(state: MessagesState) -> dict[str, Any]:
            try:
                assert held.wait(10), "the held call never started"
                with order:  # one at a time: each while the held call is in flight
                    try:
                        return {"messages": [model.invoke(state["messages"])]}
                    except RunStopped as stop:
                        refused.append(stop)
                        return {"messages": []}
            finally:
                with order:
                    finished[0] += 1
                    if finished[0] == BRANCHES:
                        done.set()

        return node

    builder = StateGraph(MessagesState)
    builder.add_node("held", holder)
    builder.add_edge(START, "held")
    builder.add_edge("held", END)
    for i in range(BRANCHES):
        builder.add_node(f"b{i}", branch(f"b{i}"))
        builder.add_edge(START, f"b{i}")
        builder.add_edge(f"b{i}", END)
    rec = RecordingObserver()
    handler = LoopobsCallbackHandler([rec], detectors=[BudgetGuard(Budget(model_calls=3))])
    graph: Any = builder.compile()
    with pytest.raises(RunStopped) as raised:  # the graph run itself is over its budget
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert raised.value.status == "budget_exceeded"

    assert len(rec.of("on_stream_start")) == 3
    assert len(refused) == BRANCHES + 1 - 3
    assert {s.status for s in refused} == {"budget_exceeded"}
    assert {str(s) for s in refused} == {"run budget exceeded: model_calls 4 > 3"}
    starts = rec.of("on_run_start")
    assert len({s.session_id for s in starts}) == 1  # the branches are in the graph's session
    assert rec.of("on_run_end")[-1].status == "budget_exceeded"
    assert handler.tracker.active_runs == 0
    assert_contract(rec.events)


def test_a_stopped_graph_run_stops_its_branches() -> None:
    """A branch run reads the stop of the run it is part of."""
    from loopobs.adapters import RunTracker

    tracker = RunTracker(detectors=[RepetitionDetector()])
    parent = tracker.start_run()
    child = tracker.start_run(branch_of=parent)
    assert child.session_id == parent.session_id
    parent.stop(RunStopped("over quota", status="over_quota"))
    with pytest.raises(RunStopped, match="over quota"):
        child.raise_if_stopped()
    child.end()
    parent.end()
    assert tracker.active_runs == 0
