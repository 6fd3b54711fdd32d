"""The Google ADK adapter on real ``Runner`` invocations, against a scripted Gemini server.

ADK's own ``Gemini`` model (google-genai underneath) is pointed at
:class:`tests._gemini_server.GeminiServer` on 127.0.0.1, so every request, response and
usage figure crosses ADK's real code. google-adk caps OpenTelemetry below the main venv's,
so these tests run in their own venv (``make test-frameworks``); elsewhere they skip.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="google-adk runs in its own venv: make test-frameworks")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.google_llm import Gemini
from google.adk.runners import InMemoryRunner
from google.genai import types

from loopobs import Budget, BudgetGuard, LoopDetected, ModelRates, RepetitionDetector, Usage
from loopobs.adapters import RunStopped
from loopobs.adapters.adk import LoopobsPlugin, observed_run, stop_of
from loopobs.testing import RecordingObserver, assert_contract
from tests._adapter_checks import Stack
from tests._gemini_server import GeminiReply, GeminiServer

ROOT = Path(__file__).resolve().parents[1]


def _pinned(package: str) -> str:
    for line in (ROOT / "scripts" / "frameworks-requirements.txt").read_text().splitlines():
        name, _, pinned = line.split("#", 1)[0].strip().partition("==")
        if name.split("[", 1)[0] == package:
            return pinned
    raise AssertionError(f"{package} is not pinned")


def test_verified_against_the_pinned_release() -> None:
    assert version("google-adk") == _pinned("google-adk") == "2.13.0"


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")  # the scripted server ignores it
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


calls_made: list[str] = []


def get_weather(city: str) -> dict[str, Any]:
    """The weather of a city."""
    calls_made.append(city)
    return {"city": city, "temp_c": 21}


def _runner(
    server: GeminiServer, plugin: LoopobsPlugin, name: str = "weather_agent"
) -> InMemoryRunner:
    agent = LlmAgent(
        name=name,
        instruction="Answer about the weather.",
        model=Gemini(model="gemini-2.5-flash", base_url=server.base_url),
        tools=[get_weather],
    )
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))


async def _ask(
    runner: InMemoryRunner, text: str, session_id: str | None = None, observed: bool = True
) -> list[Any]:
    if session_id is None:
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        session_id = session.id
    message = types.Content(role="user", parts=[types.Part(text=text)])
    events: AsyncIterator[Any] = (
        observed_run(runner, user_id="u", session_id=session_id, new_message=message)
        if observed
        else runner.run_async(user_id="u", session_id=session_id, new_message=message)
    )
    return [event async for event in events]


PRODUCTIVE = [
    GeminiReply(calls=[("fc-1", "get_weather", {"city": "Paris"})], usage=(120, 15)),
    GeminiReply(text="It is 21 C in Paris.", usage=(160, 9)),
]


async def test_an_invocation_is_one_run_with_the_servers_usage(stack: Stack) -> None:
    plugin = LoopobsPlugin(stack.observers)
    with GeminiServer(PRODUCTIVE) as server:
        await _ask(_runner(server, plugin), "Weather in Paris?")
        assert len(server.requests) == 2
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    rec = stack.recorder
    (start,) = rec.of("on_run_start")
    assert (start.agent, start.model) == ("weather_agent", "gemini-2.5-flash")
    assert [c.tool for c in rec.of("on_tool_pre")] == ["get_weather"]
    assert [c.tool_call_id for c in rec.of("on_tool_pre")] == ["fc-1"]
    assert [c.input for c in rec.of("on_tool_call_received")] == [{"city": "Paris"}]
    assert [s.provider for s in rec.of("on_stream_start")] == ["gcp.gemini"] * 2
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success, end.total_turns) == ("completed", True, 2)
    assert rec.of("on_response")[-1].text == "It is 21 C in Paris."
    assert plugin.active_runs == 0


async def test_invocations_of_one_session_share_a_loopobs_session(stack: Stack) -> None:
    plugin = LoopobsPlugin(stack.observers)
    with GeminiServer([GeminiReply(text="hi", usage=(5, 1))]) as server:
        runner = _runner(server, plugin)
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        await _ask(runner, "one", session.id)
        await _ask(runner, "two", session.id, observed=False)  # the plugin alone
    starts = stack.recorder.of("on_run_start")
    assert len(starts) == 2
    assert starts[0].session_id == starts[1].session_id
    assert [t.turn for t in stack.recorder.of("on_turn_start")] == [0, 1]
    assert_contract(stack.recorder.events)


def _looping() -> list[GeminiReply]:
    return [
        GeminiReply(calls=[(f"fc-{i}", "get_weather", {"city": "Paris"})], usage=(50, 5))
        for i in range(40)
    ]


async def test_a_runaway_loop_is_stopped_before_the_next_model_call(stack: Stack) -> None:
    plugin = LoopobsPlugin(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with GeminiServer(_looping()) as server:
        with pytest.raises(RunStopped) as info:
            await _ask(_runner(server, plugin), "loop")
        requests = len(server.requests)
    assert isinstance(info.value, LoopDetected)
    assert re.search(r"get_weather\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    assert requests == 5  # the stop came before the sixth model call
    rec = stack.recorder
    assert [d.action for d in rec.of("on_loop_detected")] == ["warn", "stop"]
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("loop_detected", False)
    assert_contract(rec.events)
    stack.check_nothing_open()
    assert plugin.active_runs == 0


async def test_without_observed_run_adk_wraps_the_stop_and_stop_of_finds_it(stack: Stack) -> None:
    plugin = LoopobsPlugin(stack.observers, detectors=[BudgetGuard(Budget(model_calls=2))])
    with GeminiServer(_looping()) as server:
        with pytest.raises(RuntimeError) as info:  # ADK's wrapper around a plugin's error
            await _ask(_runner(server, plugin), "loop", observed=False)
        assert len(server.requests) == 2
    stop = stop_of(info.value)
    assert stop is not None
    assert stop.status == "budget_exceeded"
    assert stack.recorder.of("on_run_end")[0].status == "budget_exceeded"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_a_budget_stops_the_run_through_observed_run(stack: Stack) -> None:
    plugin = LoopobsPlugin(stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))])
    with GeminiServer(_looping()) as server:
        with pytest.raises(RunStopped) as info:
            await _ask(_runner(server, plugin), "loop")
        assert len(server.requests) == 3
    assert info.value.status == "budget_exceeded"
    stack.check_nothing_open()


async def test_usage_the_model_did_not_report_is_unknown_not_zero() -> None:
    recorder = RecordingObserver()
    plugin = LoopobsPlugin([recorder])
    with GeminiServer([GeminiReply(text="no usage", usage=None)]) as server:
        await _ask(_runner(server, plugin), "hi")
    (response,) = recorder.of("on_response")
    assert response.usage is None
    assert_contract(recorder.events)


async def test_prices_price_each_call() -> None:
    recorder = RecordingObserver()
    plugin = LoopobsPlugin(
        [recorder],
        prices={"gemini-2.5-flash": ModelRates(input_per_mtok=1.0, output_per_mtok=10.0)},
    )
    with GeminiServer(PRODUCTIVE) as server:
        await _ask(_runner(server, plugin), "Weather in Paris?")
    (end,) = recorder.of("on_run_end")
    assert end.cost_usd == pytest.approx((280 * 1.0 + 24 * 10.0) / 1e6)


async def test_a_cancelled_invocation_ends_its_run(stack: Stack) -> None:
    answered = asyncio.Event()

    class Answered(RecordingObserver):
        def on_response(self, ctx: Any) -> None:
            answered.set()

    plugin = LoopobsPlugin([*stack.observers, Answered()])
    with GeminiServer(PRODUCTIVE) as server:
        runner = _runner(server, plugin)
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="Weather?")])

        async def consume() -> None:
            async for _ in observed_run(
                runner, user_id="u", session_id=session.id, new_message=message
            ):
                await asyncio.sleep(3600)  # cancelled here, after the first event

        task = asyncio.create_task(consume())
        await asyncio.wait_for(answered.wait(), timeout=60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "cancelled"
    assert_contract(stack.recorder.events)
    assert plugin.active_runs == 0


async def test_an_observer_that_raises_never_breaks_the_invocation() -> None:
    class Broken(RecordingObserver):
        def on_event(self, ctx: Any) -> None:
            raise RuntimeError("observer bug")

    plugin = LoopobsPlugin([Broken()])
    with GeminiServer(PRODUCTIVE) as server:
        events = await _ask(_runner(server, plugin), "Weather in Paris?")
    assert events[-1].content.parts[0].text == "It is 21 C in Paris."


async def test_a_streamed_invocation_reports_deltas_and_the_final_usage(stack: Stack) -> None:
    """StreamingMode.SSE: partial chunks are text deltas; the aggregated response ends the call."""
    from google.adk.agents.run_config import RunConfig, StreamingMode  # as ADK's docs import

    plugin = LoopobsPlugin(stack.observers)
    with GeminiServer(PRODUCTIVE) as server:
        runner = _runner(server, plugin)
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
        async for _ in observed_run(
            runner,
            user_id="u",
            session_id=session.id,
            new_message=message,
            run_config=RunConfig(streaming_mode=StreamingMode.SSE),
        ):
            pass
        assert all(":streamGenerateContent" in p for p in server.paths)
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    deltas = "".join(d.delta for d in stack.recorder.of("on_text_delta"))
    assert deltas.startswith("It is 21 C in")
    assert stack.recorder.of("on_response")[-1].text.endswith("Paris.")
