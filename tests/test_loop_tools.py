"""AgentLoop tools: schemas, validation, errors, timeouts, parallelism, result hashes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest
from pydantic import BaseModel

from loopobs import AgentLoop, DisplayHint, Output, RunStatus, ToolPostContext, tool
from loopobs.contract.hashing import result_hash
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import assert_contract
from tests._loop_support import add, checked, explode, make_loop, names, search, u

ANSWER = Reply(text="done", usage=u(1, 1))


class Address(BaseModel):
    """A postal address."""

    city: str
    zip: int


def test_schema_from_type_hints_and_pydantic_models() -> None:
    """@tool builds the JSON Schema from hints (pydantic models included) and the docstring."""

    @tool
    def ship(item: str, to: Address, express: bool = False) -> str:
        """Ship ``item`` to an address."""
        return "ok"

    assert ship.name == "ship"
    assert ship.description == "Ship ``item`` to an address."
    params = ship.parameters
    assert params["required"] == ["item", "to"]
    assert params["properties"]["item"] == {"type": "string"}
    assert params["properties"]["express"] == {"default": False, "type": "boolean"}
    assert params["additionalProperties"] is False
    address = params["$defs"]["Address"]
    assert address["properties"]["zip"]["type"] == "integer"
    assert ship.validate({"item": "x", "to": {"city": "Z", "zip": 8000}})["to"] == Address(
        city="Z", zip=8000
    )


async def test_sync_and_async_tools_run_and_results_keep_the_models_order() -> None:
    """Sync and async tools both run; results are appended in the model's order."""
    calls = (
        ToolCall("add", {"a": 2, "b": 3}, id="x"),
        ToolCall("search", {"query": "q"}, id="y"),
        ToolCall("add", {"a": 1, "b": 1}, id="z"),
    )
    loop, rec, client = make_loop([Reply(tool_calls=calls, usage=u(1, 1)), ANSWER])
    result = await loop.run("q")
    tool_msgs = [m for m in client.requests[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [
        ("x", "5"),
        ("y", "results for q (limit 3)"),
        ("z", "2"),
    ]
    posts: list[ToolPostContext] = rec.of("on_tool_post")
    assert all(p.outcome == "output" for p in posts)
    assert all(not p.is_error for p in posts)
    checked(rec, result)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"query": 5}, "query: Input should be a valid string"),
        ({}, "query: Field required"),
        ({"query": "a", "extra": 1}, "extra: Extra inputs are not permitted"),
        ('{"query": ', "the arguments are not a JSON object"),
        ("[1, 2]", "the arguments are not a JSON object"),
    ],
)
async def test_invalid_arguments_give_an_error_result_and_the_run_goes_on(
    args: object,
    expected: str,
) -> None:
    """Bad or unparseable arguments give an is_error result naming the problem; the run goes on."""
    call = ToolCall("search", args, id="c1")  # type: ignore[arg-type]
    loop, rec, client = make_loop([Reply(tool_calls=(call,), usage=u(1, 1)), ANSWER])
    result = await loop.run("q")
    assert result.ok
    message = next(m for m in client.requests[1].messages if m.role == "tool")
    assert message.is_error
    assert expected in message.content
    assert "search" in message.content
    post: ToolPostContext = rec.of("on_tool_post")[0]
    assert post.is_error
    assert post.outcome == "error"
    assert type(post.error).__name__ == "InvalidToolInput"
    checked(rec, result)


async def test_unknown_tool_lists_available_tools_with_no_pre_or_post() -> None:
    """An unknown tool gets an error result listing the tools; received fires, pre/post do not."""
    calls = (ToolCall("nope", {"x": 1}, id="u1"), ToolCall("add", {"a": 1, "b": 2}, id="a1"))
    loop, rec, client = make_loop([Reply(tool_calls=calls, usage=u(1, 1)), ANSWER])
    result = await loop.run("q")
    assert result.ok
    msgs = [m for m in client.requests[1].messages if m.role == "tool"]
    assert msgs[0].tool_call_id == "u1"
    assert msgs[0].is_error
    assert "unknown tool 'nope'" in msgs[0].content
    assert "available tools: add, search" in msgs[0].content
    assert [c.tool_call_id for c in rec.of("on_tool_call_received")] == ["u1", "a1"]
    assert [c.tool_call_id for c in rec.of("on_tool_pre")] == ["a1"]
    assert [c.tool_call_id for c in rec.of("on_tool_post")] == ["a1"]
    checked(rec, result)


async def test_a_raising_tool_gives_an_error_result() -> None:
    """A tool that raises becomes an is_error result with the exception's type and message."""
    call = ToolCall("explode", {"reason": "disk full"}, id="e1")
    loop, rec, client = make_loop(
        [Reply(tool_calls=(call,), usage=u(1, 1)), ANSWER], tools=[explode]
    )
    result = await loop.run("q")
    assert result.ok
    msg = next(m for m in client.requests[1].messages if m.role == "tool")
    assert msg.is_error
    assert "RuntimeError: disk full" in msg.content
    post: ToolPostContext = rec.of("on_tool_post")[0]
    assert post.outcome == "error"
    assert post.error is not None
    assert post.error.error_type == "RuntimeError"  # type: ignore[attr-defined]
    assert post.result_hash == result_hash(msg.content)
    checked(rec, result)


async def test_a_tool_past_its_timeout_gives_an_error_result() -> None:
    """A tool running past tool_timeout is cancelled into an error result; the run goes on."""
    cancelled = asyncio.Event()

    @tool
    async def slow() -> str:
        """Never finishes in time."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    loop, rec, client = make_loop(
        [Reply(tool_calls=(ToolCall("slow", {}, id="s1"),), usage=u(1, 1)), ANSWER],
        tools=[slow],
        tool_timeout=0.01,
    )
    result = await loop.run("q")
    assert result.ok
    assert cancelled.is_set()
    msg = next(m for m in client.requests[1].messages if m.role == "tool")
    assert msg.is_error
    assert "timed out after 0.01s" in msg.content
    assert type(rec.of("on_tool_post")[0].error).__name__ == "ToolTimeout"
    checked(rec, result)


async def test_a_tools_own_timeout_wins_over_the_loops() -> None:
    """@tool(timeout=...) overrides the loop's tool_timeout."""

    @tool(timeout=0.01)
    async def slow() -> str:
        """Too slow for its own timeout."""
        await asyncio.sleep(60)
        return "late"

    loop, rec, _ = make_loop(
        [Reply(tool_calls=(ToolCall("slow", {}),), usage=u(1, 1)), ANSWER],
        tools=[slow],
        tool_timeout=None,
    )
    await loop.run("q")
    assert "timed out after 0.01s" in (rec.of("on_tool_post")[0].result or "")


async def test_parallel_tools_run_concurrently_in_their_own_tasks() -> None:
    """With parallel_tool_calls every call runs at once, each in its own task."""
    arrived = 0
    all_in = asyncio.Event()
    tasks: set[asyncio.Task[object] | None] = set()

    @tool
    async def gate(n: int) -> int:
        """Waits until all three calls are running."""
        nonlocal arrived
        tasks.add(asyncio.current_task())
        arrived += 1
        if arrived == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 5)
        return n

    calls = tuple(ToolCall("gate", {"n": i}, id=f"g{i}") for i in range(3))
    loop, rec, client = make_loop([Reply(tool_calls=calls, usage=u(1, 1)), ANSWER], tools=[gate])
    result = await loop.run("q")
    assert result.ok
    assert len(tasks) == 3
    assert [m.content for m in client.requests[1].messages if m.role == "tool"] == ["0", "1", "2"]
    assert names(rec.events)[8:14] == ["on_tool_pre"] * 3 + ["on_tool_post"] * 3


async def test_sequential_tools_when_parallel_tool_calls_is_off() -> None:
    """With parallel_tool_calls=False each call finishes before the next begins."""
    calls = tuple(ToolCall("add", {"a": i, "b": 0}, id=f"s{i}") for i in range(3))
    loop, rec, _ = make_loop(
        [Reply(tool_calls=calls, usage=u(1, 1)), ANSWER], parallel_tool_calls=False
    )
    result = await loop.run("q")
    tool_events = [
        (h, getattr(c, "tool_call_id", None))
        for h, c in rec.events
        if h in ("on_tool_pre", "on_tool_post")
    ]
    assert tool_events == [(h, f"s{i}") for i in range(3) for h in ("on_tool_pre", "on_tool_post")]
    checked(rec, result)


async def test_sync_tools_do_not_block_the_event_loop() -> None:
    """A sync tool runs in a worker thread, so the event loop keeps going meanwhile."""
    release = threading.Event()
    entered = threading.Event()
    main_thread = threading.get_ident()
    seen: list[int] = []

    @tool
    def blocking() -> str:
        """Blocks until released."""
        seen.append(threading.get_ident())
        entered.set()
        assert release.wait(5)
        return "released"

    loop, _, _ = make_loop(
        [Reply(tool_calls=(ToolCall("blocking", {}),), usage=u(1, 1)), ANSWER], tools=[blocking]
    )
    task = asyncio.create_task(loop.run("q"))
    assert await asyncio.to_thread(entered.wait, 5)  # the event loop is free meanwhile
    release.set()
    assert (await task).ok
    assert seen[0] != main_thread


async def test_output_display_hint_and_outcome() -> None:
    """Output(value, display_hint) renders value for the model and reports the hint."""

    @tool
    def show() -> Output:
        """Shows some code."""
        return Output({"k": [1, 2]}, display_hint=DisplayHint.code("python"))

    loop, rec, client = make_loop(
        [Reply(tool_calls=(ToolCall("show", {}),), usage=u(1, 1)), ANSWER], tools=[show]
    )
    await loop.run("q")
    post: ToolPostContext = rec.of("on_tool_post")[0]
    assert post.display_hint == DisplayHint.code("python")
    assert post.result == '{"k": [1, 2]}'
    assert [m.content for m in client.requests[1].messages if m.role == "tool"] == [post.result]


async def test_empty_output_has_no_result_hash() -> None:
    """A tool returning nothing reports result_hash None; non-empty results are hashed."""

    @tool
    def nothing() -> None:
        """Returns None."""

    calls = (ToolCall("nothing", {}, id="n"), ToolCall("add", {"a": 1, "b": 1}, id="a"))
    loop, rec, _ = make_loop([Reply(tool_calls=calls, usage=u(1, 1)), ANSWER], tools=[nothing, add])
    await loop.run("q")
    posts = {p.tool_call_id: p for p in rec.of("on_tool_post")}
    assert posts["n"].result_hash is None
    assert posts["a"].result_hash == result_hash("2")


def test_result_hash_is_identical_in_another_process() -> None:
    """result_hash is a stable 64-bit value: a fresh interpreter computes the same number."""
    text = "results for Zürich ☀️ (limit 3)"
    code = f"from loopobs.contract.hashing import result_hash; print(result_hash({text!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    value = result_hash(text)
    assert value is not None
    assert int(out.stdout) == value
    assert 0 <= value < 2**64


async def test_a_tool_whose_result_cannot_be_rendered_gives_an_error_result() -> None:
    """A result that cannot be turned into text is an error result, with its post emitted."""

    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text for you")

    class Holder(BaseModel):
        model_config = {"arbitrary_types_allowed": True}
        thing: Unprintable

    @tool
    def weird() -> Holder:
        """Returns a model that does not serialise."""
        return Holder(thing=Unprintable())

    @tool
    def odd() -> Unprintable:
        """Returns an object without a text form."""
        return Unprintable()

    calls = (
        ToolCall("weird", {}, id="w"),
        ToolCall("odd", {}, id="o"),
        ToolCall("add", {"a": 1, "b": 1}, id="a"),
    )
    loop, rec, client = make_loop(
        [Reply(tool_calls=calls, usage=u(1, 1)), ANSWER], tools=[weird, odd, add]
    )
    result = await loop.run("q")
    assert result.status is RunStatus.COMPLETED
    msgs = {m.tool_call_id: m for m in client.requests[1].messages if m.role == "tool"}
    assert msgs["w"].is_error
    assert msgs["o"].is_error
    assert "no text for you" in msgs["o"].content
    assert msgs["a"].content == "2"
    assert_contract(rec.events)


def test_duplicate_tool_names_are_refused() -> None:
    """Two tools with one name are a configuration error."""
    with pytest.raises(ValueError, match="two tools are named 'search'"):
        AgentLoop(ScriptedClient([]), model="m", tools=[search, search])
