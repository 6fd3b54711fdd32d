"""The LangChain / LangGraph adapter on real LangGraph ReAct graphs and LangChain's fake models."""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.tools import StructuredTool, tool
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph

from loopobs import (
    Budget,
    BudgetGuard,
    Cancelled,
    EventContext,
    LoopDetected,
    LoopObserver,
    ModelRates,
    RepetitionDetector,
    ToolExecutionError,
    Usage,
)
from loopobs import tool as loopobs_tool
from loopobs.adapters import RunStopped
from loopobs.adapters.langchain import AsyncLoopobsCallbackHandler, LoopobsCallbackHandler
from loopobs.contract import trace_links
from loopobs.contract.observer import EventSink
from loopobs.llm.scripted import Reply, ToolCall
from loopobs.testing import assert_contract
from tests._adapter_checks import Stack, agent_loop_sums
from tests._langgraph_app import ai, fake_model, react_graph


def _add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


add = StructuredTool.from_function(_add, name="add")


@tool
def poll(job: str) -> str:
    """Poll a job that never finishes."""
    return "queued"


@tool
def explode(x: int) -> str:
    """A tool with a bug."""
    raise ValueError(f"bad input {x}")


def _script() -> list[Any]:
    return [
        ai(calls=[("add", {"a": 1, "b": 2}, "c1"), ("add", {"a": 3, "b": 4}, "c2")], usage=(12, 7)),
        ai("3 and 7", usage=(30, 4)),
    ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def test_a_react_graph_is_one_trace_with_exact_usage_and_metrics(
    stack: Stack, tmp_path: Path
) -> None:
    """invoke(): one invoke_agent trace, chat and execute_tool children, usage and metric sums."""
    handler = LoopobsCallbackHandler(stack.observers, agent="calculator")
    graph = react_graph(fake_model(_script()), [add])
    out = graph.invoke({"messages": [("user", "add 1+2 and 3+4")]}, config={"callbacks": [handler]})
    assert out["messages"][-1].content == "3 and 7"
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)
    (agent,) = stack.finished("invoke_agent")
    assert agent.name == "invoke_agent calculator"
    assert [c.tool_call_id for c in stack.recorder.of("on_tool_call_received")] == ["c1", "c2"]
    assert {c.tool_call_id for c in stack.recorder.of("on_tool_post")} == {"c1", "c2"}
    assert handler.tracker.active_runs == 0
    # the same script through AgentLoop: the same metric totals on both paths
    script = [
        Reply(
            tool_calls=(
                ToolCall("add", {"a": 1, "b": 2}, "c1"),
                ToolCall("add", {"a": 3, "b": 4}, "c2"),
            ),
            usage=Usage(input_tokens=12, output_tokens=7),
        ),
        Reply(text="3 and 7", usage=Usage(input_tokens=30, output_tokens=4)),
    ]
    same_tool = loopobs_tool(name="add")(_add)
    assert stack.metric_sums() == agent_loop_sums(tmp_path, script, [same_tool], "add 1+2 and 3+4")


@pytest.mark.parametrize("handler_type", [LoopobsCallbackHandler, AsyncLoopobsCallbackHandler])
async def test_async_runs_report_the_same(stack: Stack, handler_type: type[Any]) -> None:
    """ainvoke() with the sync or the async handler gives the same complete picture."""
    handler = handler_type(stack.observers)
    graph = react_graph(fake_model(_script()), [add])
    await graph.ainvoke({"messages": [("user", "add")]}, config={"callbacks": [handler]})
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)


def test_a_streamed_run_reports_deltas_and_closes(stack: Stack) -> None:
    """stream_mode="messages": text deltas inside the stream; a consumer breaking off leaves
    nothing open."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(fake_model([ai("the answer is three", usage=(5, 4))]), [add])
    chunks = [
        m.content
        for m, _ in graph.stream(
            {"messages": [("user", "q")]}, config={"callbacks": [handler]}, stream_mode="messages"
        )
    ]
    assert "".join(chunks) == "the answer is three"
    deltas = [c.delta for c in stack.recorder.of("on_text_delta")]
    assert "".join(deltas) == "the answer is three"
    assert stack.recorder.of("on_stream_success")[0].time_to_first_token_ms is not None
    graph = react_graph(fake_model([ai("another long answer here", usage=(5, 4))]), [add])
    for _ in graph.stream(
        {"messages": [("user", "q")]}, config={"callbacks": [handler]}, stream_mode="messages"
    ):
        break
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_thread_id_keeps_turns_counting(stack: Stack) -> None:
    """Two invocations on one LangGraph thread are one session: turns 0 then 1."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(fake_model([ai("one"), ai("two")]), [])
    config: Any = {"callbacks": [handler], "configurable": {"thread_id": "t-1"}}
    graph.invoke({"messages": [("user", "a")]}, config=config)
    graph.invoke({"messages": [("user", "b")]}, config=config)
    assert [c.turn for c in stack.recorder.of("on_turn_start")] == [0, 1]
    assert len({c.session_id for c in stack.recorder.of("on_run_start")}) == 1


# -- stopping a runaway loop ------------------------------------------------------------------


def _runaway(handle_tool_errors: bool | None = None) -> Any:
    """A model that polls the same job forever (fresh call ids, as real models give)."""
    answers = (
        ai(calls=[("poll", {"job": "42"}, f"p{i}")], usage=(3, 1)) for i in itertools.count()
    )
    return react_graph(
        GenericFakeChatModel(messages=answers), [poll], handle_tool_errors=handle_tool_errors
    )


@pytest.mark.parametrize("handle_tool_errors", [None, True])
def test_a_runaway_tool_loop_is_stopped_with_run_stopped(
    stack: Stack, handle_tool_errors: bool | None
) -> None:
    """With a stop policy the graph run ends raising RunStopped in the caller; status
    loop_detected; nothing left open (also when the ToolNode catches tool errors)."""
    handler = LoopobsCallbackHandler(
        stack.observers, detectors=[RepetitionDetector(warn_after=2, stop_after=4)]
    )
    with pytest.raises(RunStopped) as caught:
        _runaway(handle_tool_errors).invoke(
            {"messages": [("user", "wait for job 42")]},
            config={"callbacks": [handler], "recursion_limit": 100},
        )
    assert isinstance(caught.value, LoopDetected)
    assert caught.value.pattern.startswith("poll(args#")  # no argument values: content
    assert_contract(stack.recorder.events)
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "loop_detected"
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn", "stop"]
    assert len(stack.recorder.of("on_tool_post")) == 4
    stack.check_nothing_open()
    assert stack.prom("loopobs_runs_total", loopobs_run_status="loop_detected") == 1


@pytest.mark.parametrize("handler_type", [LoopobsCallbackHandler, AsyncLoopobsCallbackHandler])
async def test_an_async_runaway_loop_is_stopped_too(stack: Stack, handler_type: type[Any]) -> None:
    """ainvoke(): RunStopped reaches the awaiting caller, with either handler."""
    handler = handler_type(
        stack.observers, detectors=[RepetitionDetector(warn_after=2, stop_after=3)]
    )
    with pytest.raises(RunStopped):
        await _runaway().ainvoke(
            {"messages": [("user", "wait")]},
            config={"callbacks": [handler], "recursion_limit": 100},
        )
    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "loop_detected"
    stack.check_nothing_open()


def test_warn_leaves_the_runaway_loop_alone(stack: Stack) -> None:
    """A warn-only detector reports the loop; the graph runs on to its own recursion limit."""
    handler = LoopobsCallbackHandler(
        stack.observers, detectors=[RepetitionDetector(warn_after=2, stop_after=0)]
    )
    with pytest.raises(GraphRecursionError):
        _runaway().invoke(
            {"messages": [("user", "wait")]}, config={"callbacks": [handler], "recursion_limit": 12}
        )
    assert_contract(stack.recorder.events)
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn"]
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    assert len(stack.recorder.of("on_tool_post")) > 4
    stack.check_nothing_open()


# -- failures: tools, cancellation, observers ---------------------------------------------------


def test_a_tool_exception_handled_by_the_tool_node_is_a_failed_attempt(stack: Stack) -> None:
    """ToolNode(handle_tool_errors=True) turns the exception into a message: is_error post."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(
        fake_model(
            [ai(calls=[("explode", {"x": 1}, "e1")], usage=(2, 2)), ai("sorry", usage=(3, 1))]
        ),
        [explode],
        handle_tool_errors=True,
    )
    graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    (post,) = stack.recorder.of("on_tool_post")
    assert post.is_error
    assert isinstance(post.error, ToolExecutionError)
    stack.check_run(usage=Usage(input_tokens=5, output_tokens=3), chats=2, tools=1)
    (span,) = stack.finished("execute_tool")
    assert span.attributes is not None
    assert span.attributes["error.type"] == "ToolExecutionError"


def test_a_tool_exception_that_ends_the_graph_ends_the_run_failed(stack: Stack) -> None:
    """A tool exception the ToolNode re-raises fails the run; the tool span ends in error."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(
        fake_model([ai(calls=[("explode", {"x": 1}, "e1")])]), [explode], handle_tool_errors=False
    )
    with pytest.raises(ValueError, match="bad input 1"):
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert_contract(stack.recorder.events)
    (post,) = stack.recorder.of("on_tool_post")
    assert post.error.error_type == "ValueError"
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def test_cancelling_the_run_leaves_nothing_open(stack: Stack) -> None:
    """A task cancelled while a tool runs: tool post Cancelled, run cancelled, no open span."""
    started = asyncio.Event()

    @tool
    async def slow(x: int) -> str:
        """Takes forever."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(fake_model([ai(calls=[("slow", {"x": 1}, "s1")], usage=(4, 2))]), [slow])
    task = asyncio.create_task(
        graph.ainvoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_contract(stack.recorder.events)
    (post,) = stack.recorder.of("on_tool_post")
    assert isinstance(post.error, Cancelled)
    assert stack.recorder.of("on_run_end")[0].status == "cancelled"
    stack.check_nothing_open()


class _Broken(EventSink):
    def on_event(self, ctx: EventContext) -> None:
        raise RuntimeError(f"observer bug in {ctx.hook}")


def test_observer_failures_never_reach_the_graph(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer raising on every event: the graph's result is unchanged, failures counted."""
    caplog.set_level(logging.CRITICAL, logger="loopobs.observer")
    handler = LoopobsCallbackHandler([_Broken(), *stack.observers])
    out = react_graph(fake_model(_script()), [add]).invoke(
        {"messages": [("user", "add")]}, config={"callbacks": [handler]}
    )
    assert out["messages"][-1].content == "3 and 7"
    assert handler.observers.failure_count == len(stack.recorder.events)
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)


# -- parents: parallel tools, nested graphs -----------------------------------------------------


def _parallel_tools(stack: Stack, barrier: Any) -> list[Any]:
    tracer = stack.tracer_provider.get_tracer("user-code")

    @tool
    def fetch(url: str) -> str:
        """Fetch a URL (both calls wait for each other: they run in parallel)."""
        with tracer.start_as_current_span(f"user {url}"):
            barrier.wait()
        return url.upper()

    @tool
    async def afetch(url: str) -> str:
        """Async fetch."""
        with tracer.start_as_current_span(f"user {url}"):
            await barrier.wait()
        return url.upper()

    return [fetch, afetch]


def _check_user_spans_under_their_tool(stack: Stack) -> None:
    tools = {
        s.attributes["gen_ai.tool.call.id"]: s  # type: ignore[index]
        for s in stack.finished("execute_tool")
    }
    user = stack.finished("user ")
    assert len(user) == 2
    for span in user:
        call_id = "u1" if span.name.endswith("a") else "u2"
        assert span.parent is not None
        assert span.parent.span_id == tools[call_id].context.span_id


def test_parallel_sync_tools_keep_their_parents(stack: Stack) -> None:
    """Two tools running at once in LangGraph's thread pool: each user span nests under its
    own execute_tool span."""
    fetch, _ = _parallel_tools(stack, threading.Barrier(2, timeout=10))
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(
        fake_model(
            [ai(calls=[("fetch", {"url": "a"}, "u1"), ("fetch", {"url": "b"}, "u2")]), ai("done")]
        ),
        [fetch],
    )
    graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert_contract(stack.recorder.events)
    _check_user_spans_under_their_tool(stack)


async def test_parallel_async_tools_keep_their_parents(stack: Stack) -> None:
    """Two async tools gathered at once: each user span nests under its execute_tool span."""
    _, afetch = _parallel_tools(stack, asyncio.Barrier(2))
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(
        fake_model(
            [ai(calls=[("afetch", {"url": "a"}, "u1"), ("afetch", {"url": "b"}, "u2")]), ai("done")]
        ),
        [afetch],
    )
    await graph.ainvoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert_contract(stack.recorder.events)
    _check_user_spans_under_their_tool(stack)


def test_a_subgraph_node_reports_into_the_outer_run(stack: Stack) -> None:
    """The ReAct graph as a node of an outer graph: one run, one trace."""
    inner = react_graph(fake_model(_script()), [add])
    outer = StateGraph(MessagesState)
    outer.add_node("researcher", inner)
    outer.add_edge(START, "researcher")
    outer.add_edge("researcher", END)
    handler = LoopobsCallbackHandler(stack.observers)
    compiled: Any = outer.compile()
    compiled.invoke({"messages": [("user", "add")]}, config={"callbacks": [handler]})
    stack.check_run(usage=Usage(input_tokens=42, output_tokens=11), chats=2, tools=2)


def test_a_graph_run_by_a_tool_is_a_run_nested_under_that_tool(stack: Stack) -> None:
    """An agent used as a tool: its own run, whose invoke_agent span is a child of the tool's."""
    inner = react_graph(fake_model(_script()), [add])

    @tool
    def ask_calculator(question: str) -> str:
        """Ask the calculator agent."""
        out = inner.invoke({"messages": [("user", question)]})
        return str(out["messages"][-1].content)

    outer = react_graph(
        fake_model(
            [
                ai(calls=[("ask_calculator", {"question": "1+2?"}, "q1")], usage=(1, 1)),
                ai("it says 3", usage=(1, 1)),
            ]
        ),
        [ask_calculator],
    )
    handler = LoopobsCallbackHandler(stack.observers)
    outer.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    stack.check_run(usage=Usage(input_tokens=44, output_tokens=13), chats=4, tools=3, runs=2)
    agents = stack.finished("invoke_agent")
    (tool_span,) = stack.finished("execute_tool ask_calculator")
    (nested,) = [a for a in agents if a.parent is not None]
    assert nested.parent is not None
    assert nested.parent.span_id == tool_span.context.span_id


def test_importing_without_langchain_gives_the_install_hint() -> None:
    """Without langchain-core, importing the adapter fails with a one-line pip hint."""
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "try:\n    import loopobs.adapters.langchain\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert out.count("\n") == 1
    assert "pip install 'loopobs[langchain]'" in out


class _Counting(LoopObserver):
    def __init__(self) -> None:
        self.starts = 0

    def on_run_start(self, ctx: Any) -> None:
        self.starts += 1


def test_observers_attach_while_the_handler_is_in_use(stack: Stack) -> None:
    """An observer attached to a handler's set receives the next runs."""
    handler = LoopobsCallbackHandler(stack.observers)
    counting = _Counting()
    handler.observers.add(counting)
    react_graph(fake_model([ai("x")]), []).invoke(
        {"messages": [("user", "q")]}, config={"callbacks": [handler]}
    )
    assert counting.starts == 1


def test_the_installed_frameworks_are_in_the_declared_ranges() -> None:
    """CI tests the adapters on versions inside the ranges the extras declare."""
    from importlib.metadata import version

    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads(
        (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    )["project"]
    for extra in ("langchain", "otel-adapter"):
        for line in project["optional-dependencies"][extra]:
            requirement = Requirement(line)
            assert requirement.specifier, f"{line}: no version range"
            assert requirement.specifier.contains(version(requirement.name)), line


def test_parallel_branches_calling_models_keep_the_contract(stack: Stack) -> None:
    """Two graph branches calling models at once: every call is reported with its usage, and
    each run keeps the contract (overlapping calls become runs of their own)."""
    barrier = threading.Barrier(2, timeout=10)

    def branch(name: str) -> Any:
        model = GenericFakeChatModel(messages=iter([ai(f"{name} done", usage=(5, 2))]))

        def node(state: MessagesState) -> dict[str, Any]:
            barrier.wait()
            return {"messages": [model.invoke(state["messages"])]}

        return node

    builder = StateGraph(MessagesState)
    builder.add_node("left", branch("left"))
    builder.add_node("right", branch("right"))
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge("left", END)
    builder.add_edge("right", END)
    graph: Any = builder.compile()
    handler = LoopobsCallbackHandler(stack.observers)
    graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert_contract(stack.recorder.events)
    assert len(stack.recorder.of("on_stream_success")) == 2
    assert sum(e.input_tokens for e in stack.recorder.of("on_run_end")) == 10
    stack.check_nothing_open()


def test_a_budget_stops_the_graph_like_a_detector(stack: Stack) -> None:
    """A BudgetGuard among the detectors: the graph ends raising RunStopped, status
    budget_exceeded, before the model call past the budget."""
    handler = LoopobsCallbackHandler(
        stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))]
    )
    with pytest.raises(RunStopped) as caught:
        _runaway().invoke(
            {"messages": [("user", "wait")]},
            config={"callbacks": [handler], "recursion_limit": 100},
        )
    assert caught.value.status == "budget_exceeded"
    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "budget_exceeded"
    assert len(stack.recorder.of("on_stream_start")) == 3
    stack.check_nothing_open()


def test_graph_runs_are_priced_into_the_cost_metrics(stack: Stack) -> None:
    """prices=: the run's cost reaches the spans' and Prometheus' cost totals."""
    handler = LoopobsCallbackHandler(
        stack.observers,
        prices={
            "GenericFakeChatModel": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0)
        },
    )
    react_graph(fake_model(_script()), [add]).invoke(
        {"messages": [("user", "add")]}, config={"callbacks": [handler]}
    )
    (end,) = stack.recorder.of("on_run_end")
    assert end.cost_usd == pytest.approx(42.0)  # 42 input tokens at $1 each
    assert stack.prom("loopobs_cost_usd_total") == pytest.approx(42.0)
    (agent,) = stack.finished("invoke_agent")
    assert agent.attributes is not None
    assert agent.attributes["loopobs.cost.usd"] == pytest.approx(42.0)


def test_implausible_token_counts_from_the_model_are_unknown(stack: Stack) -> None:
    """A model reporting a negative and an absurd count: both unknown (0) and counted, never
    summed into the run (a negative count would cancel real spend, 2**70 breaks exports)."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(fake_model([ai("hi", usage=(-5, 2**70))]), [add])
    graph.invoke({"messages": [("user", "hi")]}, config={"callbacks": [handler]})
    (ok,) = stack.recorder.of("on_stream_success")
    assert (ok.input_tokens, ok.output_tokens) == (0, 0)
    assert handler.tracker.rejected_token_counts == 2
    assert stack.recorder.of("on_run_end")[0].status == "completed"


def test_runs_whose_end_never_comes_are_bounded_and_counted(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chains that start and never end (a crashed worker, a dropped callback): the handler
    follows a bounded number, ends the runs it forgets as cancelled and counts them."""
    import uuid

    import loopobs.adapters.langchain as lc

    monkeypatch.setattr(lc, "MAX_FOLLOWED", 100, raising=False)
    links_open = trace_links.LINKS.open_runs
    handler = LoopobsCallbackHandler(stack.observers)
    roots = [uuid.uuid4() for _ in range(1000)]
    for root in roots:
        handler.on_chain_start({"name": "graph"}, {"input": "hi"}, run_id=root)
        handler.on_chain_start({"name": "node"}, {}, run_id=uuid.uuid4(), parent_run_id=root)
    assert handler.tracker.active_runs <= 50
    assert handler.followed_runs == 100
    assert handler.evicted_runs == 1900
    assert stack.prom("loopobs_runs_active") == handler.tracker.active_runs
    ends = stack.recorder.of("on_run_end")
    assert len(ends) == 1000 - handler.tracker.active_runs
    assert {e.status for e in ends} == {"cancelled"}
    assert_contract(
        [e for e in stack.recorder.events if e[1].run_id in {end.run_id for end in ends}]
    )
    # The runs still followed end when their end comes at last; a forgotten run's end is
    # ignored. Nothing is left in the process's trace links.
    for root in roots:
        handler.on_chain_end({}, run_id=root)
    assert handler.tracker.active_runs == 0
    assert len(stack.recorder.of("on_run_end")) == 1000
    assert trace_links.LINKS.open_runs == links_open
    assert handler.followed_runs == 0


def test_a_runs_children_whose_end_never_came_are_forgotten_when_it_ends(stack: Stack) -> None:
    """An interrupted graph: a node and a tool start, their ends never come, the graph ends.
    The handler follows nothing of it afterwards, and the late ends change nothing. A root
    whose many children all end keeps no memory of them."""
    import uuid

    handler = LoopobsCallbackHandler(stack.observers)
    root, node, tool = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    handler.on_chain_start({"name": "graph"}, {"input": "hi"}, run_id=root)
    handler.on_chain_start({"name": "node"}, {}, run_id=node, parent_run_id=root)
    handler.on_tool_start({"name": "grep"}, "x", run_id=tool, parent_run_id=node)
    assert handler.followed_runs == 3
    handler.on_chain_end({}, run_id=root)
    assert handler.followed_runs == 0
    assert handler.evicted_runs == 0  # ended with their run, not forgotten for want of room
    events = len(stack.recorder.events)
    handler.on_tool_end("late", run_id=tool)
    handler.on_chain_end({}, run_id=node)
    assert len(stack.recorder.events) == events
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "completed"
    assert_contract(stack.recorder.events)

    long_lived = uuid.uuid4()
    handler.on_chain_start({"name": "graph"}, {"input": "hi"}, run_id=long_lived)
    for _ in range(500):
        child = uuid.uuid4()
        handler.on_chain_start({"name": "node"}, {}, run_id=child, parent_run_id=long_lived)
        handler.on_chain_end({}, run_id=child)
    assert handler.followed_runs == 1
    # (The handler's own bookkeeping: one id, the root's, is remembered for the run.)
    assert [len(ids) for ids in handler._bridge._members.values()] == [1]
    handler.on_chain_end({}, run_id=long_lived)
    assert handler._bridge._members == {}


def _chat_span_stream(stack: Stack) -> list[object]:
    return [(s.attributes or {}).get("gen_ai.request.stream") for s in stack.finished("chat")]


def test_request_stream_says_whether_the_model_call_streamed(stack: Stack) -> None:
    """gen_ai.request.stream is what LangChain did: false for invoke(), true once the model
    streamed (stream_mode="messages" makes LangChain stream the call), never guessed."""
    handler = LoopobsCallbackHandler(stack.observers)
    graph = react_graph(fake_model(_script()), [add])
    graph.invoke({"messages": [("user", "add")]}, config={"callbacks": [handler]})
    assert _chat_span_stream(stack) == [False, False]
    assert [c.stream for c in stack.recorder.of("on_stream_start")] == [None, None]
    assert [c.stream for c in stack.recorder.of("on_stream_success")] == [False, False]
    stack.spans.clear()
    graph = react_graph(fake_model([ai("the answer is three", usage=(5, 4))]), [add])
    list(
        graph.stream(
            {"messages": [("user", "q")]}, config={"callbacks": [handler]}, stream_mode="messages"
        )
    )
    assert _chat_span_stream(stack) == [True]
    assert stack.recorder.of("on_stream_success")[-1].stream is True
    assert_contract(stack.recorder.events)
