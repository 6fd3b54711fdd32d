"""The run driver: the turn state machine of one ``run()`` or ``resume()``.

:class:`RunDriver` holds one run's state and moves it from turn to turn:
compaction and the model check before a call (:mod:`~loopobs.loop.compaction`,
:mod:`~loopobs.loop.model_call`), the model call, the tool phase
(:mod:`~loopobs.loop.tool_phase`), the policy's verdicts
(:mod:`~loopobs.loop.policy`), and parking or resuming
(:mod:`~loopobs.loop.parking`). It brackets the run with ``on_run_start`` /
``on_run_end`` and each turn with ``on_turn_start`` / ``on_turn_end``, exactly
once each however the run ends; the phases emit the events in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopobs.contract.errors import Cancelled, Interrupted, LoopError, MaxTurnsExceeded
from loopobs.contract.events import (
    RunEndContext,
    RunStartContext,
    RunStatus,
    TurnEndContext,
    TurnStartContext,
    Usage,
)
from loopobs.contract.model import AssistantMessage, ToolResultMessage, UserMessage
from loopobs.cost.spending import RunSpending
from loopobs.loop import parking
from loopobs.loop.compaction import compact_if_needed
from loopobs.loop.context_providers import gather_context
from loopobs.loop.model_call import ModelCall, ModelResponse, note_model
from loopobs.loop.policy import Stopped
from loopobs.loop.run import Conversation, RunResult
from loopobs.loop.runtime import RunDeps, now_ns, perf
from loopobs.loop.shared_spend import SharedSpend
from loopobs.loop.tool_phase import ToolAttempt, ToolPhase

if TYPE_CHECKING:
    from loopobs.loop.checkpoint import Checkpoint

__all__ = ["INTERRUPT", "RunDriver", "is_interrupt"]

INTERRUPT = "loopobs.interrupt"
"""The cancel message that ends a run as ``interrupted`` rather than ``cancelled``."""


def is_interrupt(exc: asyncio.CancelledError) -> bool:
    """Whether ``exc`` is an interruption (``task.cancel(INTERRUPT)``)."""
    return bool(exc.args) and exc.args[0] == INTERRUPT


@dataclass(slots=True)
class _TurnState:
    turn: int
    ok: bool = False
    error: LoopError | None = None
    usage: Usage | None = None
    cost_usd: float | None = 0.0


@dataclass(slots=True)
class _Outcome:
    status: RunStatus
    error: LoopError | None = None
    answer: str | None = None
    checkpoint: Checkpoint | None = None


_SUCCESSFUL = (RunStatus.COMPLETED, RunStatus.SUSPENDED, RunStatus.SLEEPING)


@dataclass(slots=True)
class RunDriver:
    """The state of one run; lives for one ``run()`` or ``resume()`` call."""

    deps: RunDeps
    session: Conversation
    run_id: uuid.UUID = field(default_factory=uuid.uuid4)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    outcome: _Outcome | None = None
    started: float = 0.0
    query: str | None = None
    model_call: ModelCall = field(init=False)
    tool_phase: ToolPhase = field(init=False)
    spending: RunSpending = field(init=False)

    def __post_init__(self) -> None:
        deps = self.deps
        self.spending = RunSpending(
            run_id=self.run_id,
            prices=deps.prices,
            budget=deps.settings.budget,
            session=self.session,
            emit=deps.observers.on_budget_exceeded,
            on_unpriced=(
                deps.observers.on_budget_unpriced
                if deps.observers.listens("on_budget_unpriced")
                else None  # the warning is logged all the same; no context is built
            ),
        )
        shared = (
            SharedSpend(
                deps.shared_budget,
                session_id=self.session.id,
                attribution=self.session.attribution,
                prices=deps.prices,
                observers=deps.observers,
                run_id=self.run_id,
            )
            if deps.shared_budget is not None
            else None
        )
        self.model_call = ModelCall(
            deps, self.run_id, self.session, spending=self.spending, shared=shared
        )
        self.tool_phase = ToolPhase(deps, self.run_id, spending=self.spending, shared=shared)

    # -- the run ---------------------------------------------------------------------------
    async def execute(self, checkpoint: Checkpoint | None, resume_input: Any) -> RunResult:
        """Run to the end (or resume ``checkpoint`` with ``resume_input``); return the result.

        Errors of the run end up in the result; cancellation and internal errors
        are re-raised after ``on_run_end``.
        """
        deps = self.deps
        em = deps.observers
        deps.policy.open(self.run_id)
        self.started = perf()
        if checkpoint is not None:
            # The parked run's span, known again from the checkpoint (maybe in another
            # process), so the tracing observer can link this run to it.
            deps.links.restore(checkpoint.run_id, checkpoint.trace_context)
        try:
            # Inside the try: whatever escapes the start (a strict set re-raising an
            # observer's error) still ends with on_run_end for those that saw the start.
            if em.listens("on_run_start"):
                em.on_run_start(
                    RunStartContext(
                        run_id=self.run_id,
                        time_ns=now_ns(),
                        session_id=self.session.id,
                        agent=deps.settings.agent_name,
                        model=deps.model(),
                        resumed_from=checkpoint.run_id if checkpoint else None,
                        instructions=deps.settings.system_prompt or "",
                        attribution=dict(self.session.attribution),
                    )
                )
            if checkpoint is not None:
                await self._resume(checkpoint, resume_input)
            while self.outcome is None:
                await self._step()
        except asyncio.CancelledError as exc:
            if is_interrupt(exc):
                self.outcome = _Outcome(RunStatus.INTERRUPTED, Interrupted())
            else:
                self.outcome = _Outcome(RunStatus.CANCELLED, Cancelled("the run was cancelled"))
            raise
        except LoopError as exc:
            self.outcome = _Outcome(RunStatus.FAILED, exc)
        except Exception as exc:
            self.outcome = _Outcome(
                RunStatus.FAILED, LoopError(f"internal error: {type(exc).__name__}: {exc}")
            )
            raise
        finally:
            self.spending.finish()
            self._finish()
            deps.policy.close(self.run_id)
        assert self.outcome is not None
        return self._result()

    def _finish(self) -> None:
        outcome = self.outcome
        assert outcome is not None
        em = self.deps.observers
        if outcome.checkpoint is not None:
            outcome.checkpoint = parking.with_trace_context(
                outcome.checkpoint, self.deps.links, self.run_id
            )
        if em.listens("on_run_end"):
            em.on_run_end(
                RunEndContext(
                    run_id=self.run_id,
                    time_ns=now_ns(),
                    success=outcome.status in _SUCCESSFUL,
                    error=outcome.error,
                    total_turns=self.turns,
                    duration_ms=(perf() - self.started) * 1000.0,
                    status=outcome.status,
                    input_tokens=self.usage.input_tokens,
                    output_tokens=self.usage.output_tokens,
                    cost_usd=self.spending.spend.cost_usd,
                )
            )

    def _result(self) -> RunResult:
        outcome = self.outcome
        assert outcome is not None
        return RunResult(
            status=outcome.status,
            answer=outcome.answer,
            messages=tuple(self.session.messages),
            turns=self.turns,
            usage=self.usage,
            error=outcome.error,
            checkpoint=outcome.checkpoint,
            session=self.session,
            run_id=self.run_id,
            spend=self.spending.spend,
        )

    async def _step(self) -> None:
        max_turns = self.deps.settings.max_turns
        if self.turns >= max_turns:
            self.outcome = _Outcome(RunStatus.MAX_TURNS, MaxTurnsExceeded(max_turns=max_turns))
            return
        compact_if_needed(self.deps, self.run_id, self.session)
        model = self.deps.model()
        note_model(self.deps, self.run_id, self.session, model)
        if self._over_budget(model):
            return
        await self._turn(model)

    def _over_budget(self, model: str) -> bool:
        """Check the budgets before opening a turn for a call; True when a stop ended the run.

        The model call checks again before each attempt, on the request it really
        sends (with the turn's context texts); this check spares opening a turn
        (and running the context providers) for a run already over its budget.
        """
        stop = self.model_call.check_budget(model)
        if stop is None:
            return False
        self.outcome = _Outcome(stop.status, stop.error)
        return True

    # -- one turn ----------------------------------------------------------------------------
    def _query(self) -> str:
        # The run adds no user message of its own (notes are transient), so the latest
        # one is found once per run rather than by a scan of the history every turn.
        if self.query is None:
            self.query = next(
                (m.content for m in reversed(self.session.messages) if isinstance(m, UserMessage)),
                "",
            )
        return self.query

    @contextlib.contextmanager
    def _open_turn(self) -> Iterator[_TurnState]:
        """Bracket a turn: ``on_turn_start`` now, exactly one ``on_turn_end`` however it ends.

        The body records success, error and usage on the state it is given; an
        exception escaping the body becomes the turn's error and goes on up.
        """
        em = self.deps.observers
        session = self.session
        state = _TurnState(session.turn)
        session.turn += 1
        started = perf()
        if em.listens("on_turn_start"):
            em.on_turn_start(
                TurnStartContext(
                    run_id=self.run_id, time_ns=now_ns(), turn=state.turn, query=self._query()
                )
            )
        try:
            yield state
        except asyncio.CancelledError as exc:
            state.ok = False
            state.error = Interrupted() if is_interrupt(exc) else Cancelled("the run was cancelled")
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
                em.on_turn_end(
                    TurnEndContext(
                        run_id=self.run_id,
                        time_ns=now_ns(),
                        turn=state.turn,
                        success=state.ok,
                        error=state.error,
                        duration_ms=(perf() - started) * 1000.0,
                        input_tokens=usage.input_tokens if usage else 0,
                        output_tokens=usage.output_tokens if usage else 0,
                        cost_usd=state.cost_usd,
                    )
                )

    async def _turn(self, model: str) -> None:
        with self._open_turn() as state:
            deps = self.deps
            if deps.providers:
                self.session.context_texts = await gather_context(
                    deps.providers,
                    deps.observers,
                    self.run_id,
                    state.turn,
                    self._query(),
                    deps.settings.context_provider_timeout,
                )
            try:
                response = await self.model_call(state.turn, model)
            except Stopped as stopped:
                self.outcome = _Outcome(stopped.stop.status, stopped.stop.error)
                state.ok, state.error = False, stopped.stop.error
                return
            finally:
                self.session.context_texts = []
            if response.usage is not None:
                self.usage = self.usage + response.usage
            state.usage = response.usage
            state.cost_usd = response.cost_usd
            state.ok, state.error = await self._after_response(state.turn, response)

    async def _after_response(
        self, turn: int, response: ModelResponse
    ) -> tuple[bool, LoopError | None]:
        """Record the response, run its tools; return the turn's (success, error)."""
        session = self.session
        policy = self.deps.policy
        if not response.calls:
            session.messages.append(
                AssistantMessage(
                    content=response.text,
                    thinking=response.thinking,
                    thinking_blocks=response.blocks,
                )
            )
            stop = policy.apply(self.run_id, session)
            if stop is not None:
                self.outcome = _Outcome(stop.status, stop.error, answer=response.text)
                return False, stop.error
            self.outcome = _Outcome(RunStatus.COMPLETED, answer=response.text)
            return True, None
        session.messages.append(
            AssistantMessage(
                content=response.text,
                tool_calls=tuple(response.calls),
                thinking=response.thinking,
                thinking_blocks=response.blocks,
            )
        )
        # Verdicts on the response (a warning is a note for the next call); a stop still
        # lets the requested tools run, so every call in the conversation has its result.
        early_stop = policy.apply(self.run_id, session)
        outcomes = await self.tool_phase(turn, response.calls, received=True)
        if self._park(turn, outcomes):
            return True, None
        session.messages.extend(o.message for o in outcomes if o.message is not None)
        stop = early_stop or policy.apply(self.run_id, session)
        if stop is not None:
            self.outcome = _Outcome(stop.status, stop.error)
            return False, stop.error
        return True, None

    def _park(
        self,
        turn: int,
        outcomes: Sequence[ToolAttempt],
        wave_results: Sequence[ToolResultMessage | None] | None = None,
    ) -> bool:
        """If a call parked, end the run with the checkpoint; return whether one did."""
        deps = self.deps
        parked = parking.park(
            deps.observers, self.run_id, self.session, turn, deps.model(), outcomes, wave_results
        )
        if parked is None:
            return False
        self.outcome = _Outcome(parked.status, checkpoint=parked.checkpoint)
        return True

    # -- resuming ----------------------------------------------------------------------------
    async def _resume(self, checkpoint: Checkpoint, resume_input: Any) -> None:
        """Settle the parked wave: apply the input or re-run the parked calls, then go on."""
        plan = parking.plan_resume(checkpoint, resume_input)
        if plan.to_run:
            await self._resume_turn(plan)
            if self.outcome is not None:
                return
        self.session.messages.extend(r for r in plan.results if r is not None)

    async def _resume_turn(self, plan: parking.ResumePlan) -> None:
        """A turn made only of re-running parked calls (no model call)."""
        from loopobs.loop.checkpoint import Checkpoint  # loaded already: a checkpoint exists

        calls = plan.to_run
        with self._open_turn() as state:
            outcomes = await self.tool_phase(
                state.turn,
                [Checkpoint.part(c) for c in calls],
                received=False,
                attempts=[c.attempt + 1 for c in calls],
            )
            for call, outcome in zip(calls, outcomes, strict=True):
                if outcome.message is not None:
                    plan.results[plan.slots[call.id]] = outcome.message
            self._park(state.turn, outcomes, wave_results=plan.results)
            state.ok = True
