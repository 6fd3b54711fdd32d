"""The run driver: one ``run()`` or ``resume()`` of an :class:`~loopobs.core.loop.AgentLoop`.

``RunDriver`` holds one run's state and drives it turn by turn: compaction and model
switches before a call, the model call with fallback, the tool phase (each
attempt in its own task), detector verdicts, parking and resuming. It emits
every event of the contract (``docs/events.md``) through the loop's observer set,
building a context only when some observer listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopobs.core import hashing
from loopobs.core.compaction import estimate_tokens
from loopobs.core.errors import (
    Cancelled,
    ContextExceeded,
    FallbackExhausted,
    InvalidToolInput,
    LoopDetected,
    LoopError,
    MaxTurnsExceeded,
    ModelError,
    StreamError,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolTimeout,
)
from loopobs.core.events import (
    CompactedContext,
    FallbackContext,
    LoopDetectedContext,
    ModelSwitchedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    SleepContext,
    StreamContext,
    StreamFailureContext,
    StreamStartContext,
    SuspendedContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    ToolCallReceivedContext,
    ToolOutcomeKind,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
    Usage,
)
from loopobs.core.model import (
    AssistantMessage,
    Finish,
    Message,
    ModelRequest,
    TextDelta,
    ThinkingBlock,
    ThinkingBlockReady,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from loopobs.core.run import Checkpoint, ParkedCall, RunResult, RunStatus, Session
from loopobs.core.tools import Output, Sleep, Suspend, Tool, ToolReturn, render_result
from loopobs.exporters import trace_links

if TYPE_CHECKING:
    from loopobs.core.loop import AgentLoop

__all__ = ["RunDriver"]

_now_ns = time.time_ns
_perf = time.perf_counter


@dataclass(slots=True)
class _Response:
    text: str
    thinking: str | None
    calls: list[ToolCallPart]
    usage: Usage | None
    blocks: tuple[ThinkingBlock, ...] = ()


@dataclass(slots=True)
class _ToolResult:
    message: ToolResultMessage | None
    park: Suspend | Sleep | None = None
    call: ToolCallPart | None = None
    attempt: int = 0


@dataclass(slots=True)
class _TurnState:
    turn: int
    ok: bool = False
    error: LoopError | None = None
    usage: Usage | None = None


@dataclass(slots=True)
class _Outcome:
    status: RunStatus
    error: LoopError | None = None
    answer: str | None = None
    checkpoint: Checkpoint | None = None


@dataclass(slots=True)
class RunDriver:
    """The state of one run; lives for one ``run()`` or ``resume()`` call."""

    loop: AgentLoop
    session: Session
    resumed: Checkpoint | None = None
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    outcome: _Outcome | None = None
    started: float = 0.0
    query: str | None = None

    # -- the run ---------------------------------------------------------------------------
    async def execute(self, checkpoint: Checkpoint | None, resume_input: Any) -> RunResult:
        loop = self.loop
        em = loop._emit
        policy = loop._policy
        policy.verdicts[self.run_id] = []
        self.started = _perf()
        if checkpoint is not None:
            # The parked run's span, known again from the checkpoint (maybe in another
            # process), so the tracing observer can link this run to it.
            trace_links.restore(checkpoint.run_id, checkpoint.trace_context)
        if em.listens("on_run_start"):
            em.on_run_start(RunStartContext(
                run_id=self.run_id, time_ns=_now_ns(), session_id=self.session.id,
                agent=loop.agent_name, model=loop.model,
                resumed_from=checkpoint.run_id if checkpoint else None,
                instructions=loop.system_prompt or "",
            ))
        try:
            if checkpoint is not None:
                await self._resume(checkpoint, resume_input)
            while self.outcome is None:
                await self._step()
        except asyncio.CancelledError:
            self.outcome = _Outcome(RunStatus.CANCELLED, Cancelled("the run was cancelled"))
            raise
        except LoopError as exc:
            self.outcome = _Outcome(RunStatus.FAILED, exc)
        except Exception as exc:
            self.outcome = _Outcome(RunStatus.FAILED,
                                    LoopError(f"internal error: {type(exc).__name__}: {exc}"))
            raise
        finally:
            self._finish()
            policy.verdicts.pop(self.run_id, None)
        assert self.outcome is not None
        return self._result()

    def _finish(self) -> None:
        outcome = self.outcome
        assert outcome is not None
        em = self.loop._emit
        if outcome.checkpoint is not None:
            carrier = trace_links.carrier(self.run_id)
            if carrier is not None:
                outcome.checkpoint = outcome.checkpoint.model_copy(
                    update={"trace_context": carrier})
        if em.listens("on_run_end"):
            em.on_run_end(RunEndContext(
                run_id=self.run_id, time_ns=_now_ns(),
                success=outcome.status in (RunStatus.COMPLETED, RunStatus.SUSPENDED,
                                           RunStatus.SLEEPING),
                error=outcome.error, total_turns=self.turns,
                duration_ms=(_perf() - self.started) * 1000.0, status=outcome.status.value,
                input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens,
            ))

    def _result(self) -> RunResult:
        outcome = self.outcome
        assert outcome is not None
        return RunResult(
            status=outcome.status, answer=outcome.answer, messages=tuple(self.session.messages),
            turns=self.turns, usage=self.usage, error=outcome.error,
            checkpoint=outcome.checkpoint, session=self.session, run_id=self.run_id,
        )

    async def _step(self) -> None:
        loop = self.loop
        if self.turns >= loop.max_turns:
            self.outcome = _Outcome(RunStatus.MAX_TURNS,
                                    MaxTurnsExceeded(max_turns=loop.max_turns))
            return
        self._maybe_compact()
        model = loop.model
        self._note_model(model)
        await self._turn(model)

    # -- model switching and compaction ----------------------------------------------------
    def _note_model(self, model: str) -> None:
        session = self.session
        previous = session.last_model
        session.last_model = model
        if previous is not None and previous != model:
            em = self.loop._emit
            if em.listens("on_model_switched"):
                em.on_model_switched(ModelSwitchedContext(
                    run_id=self.run_id, time_ns=_now_ns(), from_model=previous, to_model=model))

    def _estimate(self) -> int:
        session = self.session
        if session.last_input_tokens is not None:
            new = session.messages[session.messages_at_last_usage:]
            return session.last_input_tokens + estimate_tokens(new)
        return estimate_tokens(session.messages, [t.definition for t in self.loop.tools.values()])

    def _maybe_compact(self) -> None:
        loop = self.loop
        window = loop.context_window
        forced = self.session.compact_requested
        self.session.compact_requested = False
        if window is None and not forced:
            return
        before = self._estimate()
        threshold = int(window * loop.compaction_threshold) if window is not None else None
        if threshold is not None and before >= threshold:
            reason = "threshold"
            target = max(1, threshold * 3 // 4)
        elif forced:
            reason = "detector"
            target = max(1, before // 2)
        else:
            return
        session = self.session
        old = session.messages
        # ``before`` may be the provider's count; compactors measure with the character
        # heuristic. Give the compactor its target in its own units, and report the size
        # after in the provider's (else a heuristic that undercounts never compacts).
        measured = estimate_tokens(old)
        scale = before / measured if measured > 0 else 1.0
        compacted = list(loop.compactor.compact(list(old), max(1, int(target / scale))))
        removed = len(old) - len(compacted)
        if removed > 0:
            session.messages = compacted
            session.last_input_tokens = None
            after = round(estimate_tokens(compacted) * scale)
            em = loop._emit
            if em.listens("on_compaction"):
                em.on_compaction(CompactedContext(
                    run_id=self.run_id, time_ns=_now_ns(), tokens_before=before,
                    tokens_after=after, tokens_saved=max(0, before - after),
                    messages_removed=removed, reason=reason,
                ))
        else:
            after = before
        if window is not None and after >= window:
            raise ContextExceeded(used=after, limit=window)

    # -- one turn ----------------------------------------------------------------------------
    def _query(self) -> str:
        # The run adds no user message of its own (notes are transient), so the latest
        # one is found once per run rather than by a scan of the history every turn.
        if self.query is None:
            self.query = next((m.content for m in reversed(self.session.messages)
                               if isinstance(m, UserMessage)), "")
        return self.query

    @contextlib.contextmanager
    def _open_turn(self) -> Iterator[_TurnState]:
        """Bracket a turn: ``on_turn_start`` now, exactly one ``on_turn_end`` however it ends.

        The body records success, error and usage on the state it is given; an
        exception escaping the body becomes the turn's error and goes on up.
        """
        em = self.loop._emit
        session = self.session
        state = _TurnState(session.turn)
        session.turn += 1
        started = _perf()
        if em.listens("on_turn_start"):
            em.on_turn_start(TurnStartContext(run_id=self.run_id, time_ns=_now_ns(),
                                              turn=state.turn, query=self._query()))
        try:
            yield state
        except asyncio.CancelledError:
            state.ok, state.error = False, Cancelled("the run was cancelled")
            raise
        except LoopError as exc:
            state.ok, state.error = False, exc
            raise
        except Exception as exc:
            state.ok = False
            state.error = LoopError(f"internal error: {type(exc).__name__}: {exc}")
            raise
        finally:
            self.turns += 1
            if em.listens("on_turn_end"):
                usage = state.usage
                em.on_turn_end(TurnEndContext(
                    run_id=self.run_id, time_ns=_now_ns(), turn=state.turn, success=state.ok,
                    error=state.error, duration_ms=(_perf() - started) * 1000.0,
                    input_tokens=usage.input_tokens if usage else 0,
                    output_tokens=usage.output_tokens if usage else 0,
                ))

    async def _turn(self, model: str) -> None:
        with self._open_turn() as state:
            response = await self._call_model(state.turn, model)
            state.usage = response.usage
            state.ok, state.error = await self._after_response(state.turn, response)

    async def _after_response(
        self, turn: int, response: _Response
    ) -> tuple[bool, LoopError | None]:
        """Record the response, run its tools; return the turn's (success, error)."""
        session = self.session
        if not response.calls:
            session.messages.append(AssistantMessage(content=response.text,
                                                     thinking=response.thinking,
                                                     thinking_blocks=response.blocks))
            stop = self._apply_verdicts()
            if stop is not None:
                self.outcome = _Outcome(stop[0], stop[1], answer=response.text)
                return False, stop[1]
            self.outcome = _Outcome(RunStatus.COMPLETED, answer=response.text)
            return True, None
        session.messages.append(AssistantMessage(
            content=response.text, tool_calls=tuple(response.calls), thinking=response.thinking,
            thinking_blocks=response.blocks))
        # Verdicts on the response (a warning is a note for the next call); a stop still
        # lets the requested tools run, so every call in the conversation has its result.
        early_stop = self._apply_verdicts()
        results = await self._tool_phase(turn, response.calls, received=True)
        if self._park(turn, results):
            return True, None
        session.messages.extend(r.message for r in results if r.message is not None)
        stop = early_stop or self._apply_verdicts()
        if stop is not None:
            self.outcome = _Outcome(stop[0], stop[1])
            return False, stop[1]
        return True, None

    def _apply_verdicts(self) -> tuple[RunStatus, LoopError] | None:
        """Apply queued detector verdicts: notes, compaction requests, or a stop."""
        stop: tuple[RunStatus, LoopError] | None = None
        for verdict in self.loop._policy.take(self.run_id):
            if isinstance(verdict, LoopDetectedContext):
                what = (f"the tool call pattern {verdict.pattern} "
                        f"repeated {verdict.repetitions} times")
                status = RunStatus.LOOP_DETECTED
                pattern = verdict.pattern
            else:
                what = f"your last {verdict.consecutive} answers are nearly identical"
                status = RunStatus.CONVERGED
                pattern = "converged answers"
            action = verdict.action
            if action in ("stop", "ask_user") and stop is None:
                stop = (status, LoopDetected(f"stopped: {what}", pattern=pattern))
            elif action == "compact":
                self.session.compact_requested = True
            elif action in ("warn", "switch_phase"):
                self.session.pending_notes.append(
                    f"[loopobs] Note: {what}. Try a different approach or give your final answer."
                )
        return stop

    # -- the model call, with fallback ------------------------------------------------------
    async def _call_model(self, turn: int, model: str) -> _Response:
        loop = self.loop
        chain = [model, *(m for m in loop.fallback_models if m != model)]
        tried: list[str] = []
        for attempt, current in enumerate(chain):
            try:
                return await self._stream(turn, current, attempt)
            except ModelError as exc:
                tried.append(current)
                if not exc.retryable:
                    raise
                if attempt + 1 == len(chain):
                    raise FallbackExhausted(models=tried, provider=exc.provider) from exc
                following = chain[attempt + 1]
                em = loop._emit
                if em.listens("on_fallback"):
                    em.on_fallback(FallbackContext(run_id=self.run_id, time_ns=_now_ns(),
                                                   from_model=current, to_model=following,
                                                   turn=turn))
                self.session.last_model = current
                self._note_model(following)
        raise AssertionError("unreachable: the chain is never empty")  # pragma: no cover

    def _request(self, model: str) -> ModelRequest:
        session = self.session
        messages: list[Message] = list(session.messages)
        messages.extend(UserMessage(content=n) for n in session.pending_notes)
        return ModelRequest(model=model, messages=tuple(messages),
                            tools=tuple(t.definition for t in self.loop.tools.values()))

    async def _stream(self, turn: int, model: str, attempt: int) -> _Response:
        loop = self.loop
        em = loop._emit
        client = loop.client
        provider = getattr(client, "provider", "")
        run_id = self.run_id
        request = self._request(model)
        sent_messages = len(self.session.messages)
        if em.listens("on_stream_start"):
            em.on_stream_start(StreamStartContext(run_id=run_id, time_ns=_now_ns(), turn=turn,
                                                  model=model, provider=provider, attempt=attempt))
        started = _perf()
        first: float | None = None
        text: list[str] = []
        thinking: list[str] | None = None
        calls: list[ToolCallPart] = []
        blocks: list[ThinkingBlock] = []
        usage: Usage | None = None
        finish: Finish | None = None
        stream: Any = None
        try:
            try:
                stream = client.stream(request)
                async for event in stream:
                    if first is None:
                        first = _perf()
                    if isinstance(event, TextDelta):
                        text.append(event.text)
                        if em.listens("on_text_delta"):
                            em.on_text_delta(TextDeltaContext(run_id=run_id, time_ns=_now_ns(),
                                                              turn=turn, delta=event.text))
                    elif isinstance(event, ThinkingDelta):
                        thinking = thinking if thinking is not None else []
                        thinking.append(event.text)
                        if em.listens("on_thinking_delta"):
                            em.on_thinking_delta(ThinkingDeltaContext(
                                run_id=run_id, time_ns=_now_ns(), turn=turn, delta=event.text))
                    elif isinstance(event, ToolCallReady):
                        calls.append(event.call)
                    elif isinstance(event, ThinkingBlockReady):
                        blocks.append(event.block)
                    elif isinstance(event, UsageReport):
                        usage = event.usage
                    elif isinstance(event, Finish):
                        finish = event
                if finish is None:
                    raise StreamError("the model stream ended before its final event",
                                      provider=provider)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            self._stream_failed(turn, model, provider, attempt, started, Cancelled())
            raise
        except LoopError as exc:
            self._stream_failed(turn, model, provider, attempt, started, exc)
            raise
        except Exception as exc:
            err = ModelError(f"the model client raised {type(exc).__name__}: {exc}",
                             retryable=False, provider=provider)
            self._stream_failed(turn, model, provider, attempt, started, err)
            raise err from exc
        ended = _perf()
        session = self.session
        if usage is not None:
            self.usage = self.usage + usage
            if usage.input_tokens > 0:
                session.last_input_tokens = usage.input_tokens
                session.messages_at_last_usage = sent_messages
        session.pending_notes.clear()
        response_text = "".join(text)
        if em.listens("on_stream_success"):
            u = usage or Usage()
            em.on_stream_success(StreamContext(
                run_id=run_id, time_ns=_now_ns(), turn=turn, model=model,
                input_tokens=u.input_tokens, output_tokens=u.output_tokens, provider=provider,
                attempt=attempt, duration_ms=(ended - started) * 1000.0,
                time_to_first_token_ms=(first - started) * 1000.0 if first is not None else None,
                finish_reason=finish.reason, response_id=finish.response_id,
                response_model=finish.response_model,
                cache_read_input_tokens=u.cache_read_input_tokens,
                cache_write_input_tokens=u.cache_write_input_tokens,
                reasoning_output_tokens=u.reasoning_output_tokens,
            ))
        if em.listens("on_response"):
            em.on_response(ResponseContext(run_id=run_id, time_ns=_now_ns(), turn=turn,
                                           text=response_text, usage=usage,
                                           tool_calls=len(calls)))
        return _Response(response_text, "".join(thinking) if thinking is not None else None,
                         calls, usage, tuple(blocks))

    def _stream_failed(self, turn: int, model: str, provider: str, attempt: int,
                       started: float, error: LoopError) -> None:
        em = self.loop._emit
        if em.listens("on_stream_failure"):
            em.on_stream_failure(StreamFailureContext(
                run_id=self.run_id, time_ns=_now_ns(), turn=turn, model=model, error=error,
                provider=provider, attempt=attempt, duration_ms=(_perf() - started) * 1000.0))

    # -- tools -------------------------------------------------------------------------------
    async def _tool_phase(self, turn: int, calls: Sequence[ToolCallPart], *, received: bool,
                          attempts: Sequence[int] | None = None) -> list[_ToolResult]:
        """Run ``calls``; results come back in the model's order."""
        loop = self.loop
        em = loop._emit
        if received and em.listens("on_tool_call_received"):
            for call in calls:
                known = loop.tools.get(call.name)
                em.on_tool_call_received(ToolCallReceivedContext(
                    run_id=self.run_id, time_ns=_now_ns(), turn=turn, tool=call.name,
                    call_id=call.id, input=call.arguments,
                    annotations=known.annotations if known is not None else None))
        results: list[_ToolResult | None] = [None] * len(calls)
        pending: list[tuple[int, asyncio.Task[_ToolResult]]] = []
        for index, call in enumerate(calls):
            found = loop.tools.get(call.name)
            if found is None:
                error = ToolNotFound(tool=call.name, available=sorted(loop.tools))
                results[index] = _ToolResult(ToolResultMessage(
                    tool_call_id=call.id, name=call.name, content=f"Error: {error}",
                    is_error=True))
                continue
            attempt = attempts[index] if attempts is not None else 0
            task = asyncio.create_task(self._execute(turn, found, call, attempt))
            pending.append((index, task))
            if not loop.parallel_tool_calls:
                await _finish_tasks([task])
        if loop.parallel_tool_calls and pending:
            await _finish_tasks([t for _, t in pending])
        for index, task in pending:
            results[index] = task.result()
        return [r for r in results if r is not None]

    async def _execute(self, turn: int, found: Tool, call: ToolCallPart,
                       attempt: int) -> _ToolResult:
        """One tool call attempt; runs in its own task, which emits its pre and post events."""
        em = self.loop._emit
        run_id = self.run_id
        if em.listens("on_tool_pre"):
            em.on_tool_pre(ToolPreContext(run_id=run_id, time_ns=_now_ns(), turn=turn,
                                          tool=found.name, tool_call_id=call.id, attempt=attempt))
        started = _perf()
        error: ToolError | Cancelled | None = None
        returned: ToolReturn | None = None
        timeout = found.timeout if found.timeout is not None else self.loop.tool_timeout
        text: str | None = None
        try:
            if call.raw_arguments is not None:
                # The raw text is content: the model sees it in the result text below, but
                # the error (whose message reaches span statuses and logs) never holds it.
                raise InvalidToolInput(tool=found.name,
                                       errors=["the arguments are not a JSON object"])
            if timeout is None:
                returned = await found.invoke(call.arguments)
            else:
                returned = await _with_timeout(found.invoke(call.arguments), timeout)
            if isinstance(returned, Output):
                # Inside the try: a value with no text form is the tool's error, and the
                # attempt still gets its on_tool_post.
                text = render_result(returned.value)
        except asyncio.CancelledError:
            self._tool_post(turn, found.name, call.id, attempt, started, None, Cancelled(), None)
            raise
        except asyncio.TimeoutError:
            error = ToolTimeout(tool=found.name, timeout_s=timeout or 0.0)
        except ToolError as exc:
            error = exc
        except Exception as exc:
            error = ToolExecutionError(f"{type(exc).__name__}: {exc}", tool=found.name,
                                       error_type=type(exc).__name__)
        if error is not None:
            text = f"Error: {error}"
            if call.raw_arguments is not None and isinstance(error, InvalidToolInput):
                text += f" (received {call.raw_arguments[:200]!r})"
            self._tool_post(turn, found.name, call.id, attempt, started, text, error, None)
            return _ToolResult(ToolResultMessage(tool_call_id=call.id, name=found.name,
                                                 content=text, is_error=True))
        assert returned is not None
        if isinstance(returned, (Suspend, Sleep)):
            self._tool_post(turn, found.name, call.id, attempt, started, None, None, returned)
            return _ToolResult(None, park=returned, call=call, attempt=attempt)
        assert text is not None
        self._tool_post(turn, found.name, call.id, attempt, started, text, None, returned)
        return _ToolResult(ToolResultMessage(tool_call_id=call.id, name=found.name, content=text))

    def _tool_post(self, turn: int, name: str, call_id: str, attempt: int, started: float,
                   text: str | None, error: LoopError | None, returned: ToolReturn | None) -> None:
        em = self.loop._emit
        if not em.listens("on_tool_post"):
            return
        outcome: ToolOutcomeKind
        if error is not None:
            outcome = "error"
        elif isinstance(returned, Suspend):
            outcome = "suspend"
        elif isinstance(returned, Sleep):
            outcome = "sleep"
        else:
            outcome = "output"
        em.on_tool_post(ToolPostContext(
            run_id=self.run_id, time_ns=_now_ns(), tool_call_id=call_id, turn=turn, tool=name,
            result_hash=hashing.result_hash(text) if text else None, is_error=error is not None,
            duration_ms=(_perf() - started) * 1000.0,
            display_hint=returned.display_hint if isinstance(returned, Output) else None,
            attempt=attempt, outcome=outcome, error=error, result=text,
        ))

    # -- parking and resuming ----------------------------------------------------------------
    def _park(self, turn: int, results: list[_ToolResult],
              wave_results: list[ToolResultMessage | None] | None = None) -> bool:
        """If a call parked the run, emit the park event and end the run with a checkpoint.

        ``wave_results`` are the results of the whole parked wave when ``results``
        covers only part of it (calls re-run on resume).
        """
        parks = [r for r in results if r.park is not None]
        if not parks:
            return False
        first = parks[0]
        assert first.call is not None
        assert first.park is not None
        em = self.loop._emit
        session = self.session
        parked = ParkedCall(id=first.call.id, name=first.call.name,
                            arguments=dict(first.call.arguments), attempt=first.attempt)
        rerun = [ParkedCall(id=r.call.id, name=r.call.name, arguments=dict(r.call.arguments),
                            attempt=r.attempt) for r in parks[1:] if r.call is not None]
        common: dict[str, Any] = {
            "run_id": self.run_id, "session_id": session.id, "turn": session.turn,
            "model": session.last_model or self.loop.model, "messages": list(session.messages),
            "parked": parked, "rerun": rerun,
            "results": wave_results if wave_results is not None else [r.message for r in results],
        }
        if isinstance(first.park, Suspend):
            if em.listens("on_suspended"):
                em.on_suspended(SuspendedContext(
                    run_id=self.run_id, time_ns=_now_ns(), turn=turn, tool=parked.name,
                    tool_call_id=parked.id, reason=first.park.reason,
                    input_schema=dict(first.park.input_schema), kind=first.park.kind))
            checkpoint = Checkpoint(kind="suspend", reason=first.park.reason,
                                    input_schema=dict(first.park.input_schema),
                                    suspension_kind=first.park.kind, **common)
            self.outcome = _Outcome(RunStatus.SUSPENDED, checkpoint=checkpoint)
        else:
            if em.listens("on_sleep"):
                em.on_sleep(SleepContext(run_id=self.run_id, time_ns=_now_ns(), turn=turn,
                                         tool=parked.name, tool_call_id=parked.id,
                                         wake_at=first.park.wake_at))
            checkpoint = Checkpoint(kind="sleep", wake_at=first.park.wake_at, **common)
            self.outcome = _Outcome(RunStatus.SLEEPING, checkpoint=checkpoint)
        return True

    async def _resume(self, checkpoint: Checkpoint, resume_input: Any) -> None:
        """Settle the parked wave: apply the input or re-run the parked calls, then go on."""
        results: list[ToolResultMessage | None] = list(checkpoint.results)
        slots = {cid: i for i, cid in enumerate(self._wave_ids(checkpoint))}
        to_run = list(checkpoint.rerun)
        if checkpoint.kind == "suspend":
            results[slots[checkpoint.parked.id]] = ToolResultMessage(
                tool_call_id=checkpoint.parked.id, name=checkpoint.parked.name,
                content=render_result(resume_input))
        else:
            to_run.insert(0, checkpoint.parked)
        if to_run:
            await self._resume_turn(to_run, results, slots)
            if self.outcome is not None:
                return
        self.session.messages.extend(r for r in results if r is not None)

    async def _resume_turn(self, calls: list[ParkedCall],
                           results: list[ToolResultMessage | None], slots: dict[str, int]) -> None:
        """A turn made only of re-running parked calls (no model call)."""
        with self._open_turn() as state:
            outcomes = await self._tool_phase(state.turn, [Checkpoint.part(c) for c in calls],
                                              received=False,
                                              attempts=[c.attempt + 1 for c in calls])
            for call, outcome in zip(calls, outcomes, strict=True):
                if outcome.message is not None:
                    results[slots[call.id]] = outcome.message
            self._park(state.turn, outcomes, wave_results=results)
            state.ok = True

    @staticmethod
    def _wave_ids(checkpoint: Checkpoint) -> list[str]:
        for message in reversed(checkpoint.messages):
            if isinstance(message, AssistantMessage) and message.tool_calls:
                return [c.id for c in message.tool_calls]
        return []


if sys.version_info >= (3, 11):  # pragma: no cover - version switch

    async def _with_timeout(awaitable: Awaitable[ToolReturn], timeout: float) -> ToolReturn:
        # asyncio.timeout cancels in place; wait_for would wrap the call in another task.
        async with asyncio.timeout(timeout):
            return await awaitable

else:  # pragma: no cover - version switch

    async def _with_timeout(awaitable: Awaitable[ToolReturn], timeout: float) -> ToolReturn:
        return await asyncio.wait_for(awaitable, timeout)


async def _finish_tasks(tasks: list[asyncio.Task[_ToolResult]]) -> None:
    """Wait for every task; if we are cancelled (or one fails), cancel the rest and wait for them.

    The tasks emit their own ``on_tool_post`` when cancelled, so waiting for them
    keeps every post before the turn's end.
    """
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # Cancelled, or (an internal error) one task failed: gather does not wait for the
        # others, so end them here, before the turn ends.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
