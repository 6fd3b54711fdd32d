"""The tool phase of a turn: run the calls a response asked for, each attempt in its own task.

:class:`ToolPhase` emits ``on_tool_call_received`` for each call of a fresh
response, then runs the calls (concurrently when the loop allows it, else one
after the other). Each attempt's task emits its ``on_tool_pre`` and exactly
one ``on_tool_post`` — also on timeout, error and cancellation — and the phase
returns only when every task has ended, so no post lands after the turn's end.
A failing tool becomes an error result for the model, never a failed run; that
includes a tool raising ``CancelledError`` when nobody cancelled the run.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from loopobs.contract import hashing
from loopobs.contract.errors import (
    BudgetExceeded,
    Cancelled,
    InvalidToolInput,
    LoopError,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolTimeout,
)
from loopobs.contract.events import (
    BudgetExceededContext,
    ToolCallReceivedContext,
    ToolOutcomeKind,
    ToolPostContext,
    ToolPreContext,
)
from loopobs.contract.model import ToolCallPart, ToolResultMessage
from loopobs.contract.tools import (
    Output,
    Sleep,
    Suspend,
    Tool,
    ToolCallScope,
    ToolReturn,
    enter_tool_call,
    render_result,
)
from loopobs.cost.shared import Reservation
from loopobs.cost.spending import RunSpending
from loopobs.loop.runtime import RunDeps, now_ns, perf
from loopobs.loop.shared_spend import SharedSpend

__all__ = ["ToolAttempt", "ToolPhase"]


@dataclass(slots=True)
class ToolAttempt:
    """How one call's attempt ended: a result message for the model, or a park."""

    message: ToolResultMessage | None
    """None when the call parked the run."""
    park: Suspend | Sleep | None = None
    call: ToolCallPart | None = None
    """Set for a park: the call to record in the checkpoint."""
    attempt: int = 0


class ToolPhase:
    """Runs tool calls for the turns of one run.

    Each attempt counts in ``spending`` (when given) and checks its budgets after
    its ``on_tool_post``.
    """

    __slots__ = ("_deps", "_run_id", "_shared", "_spending")

    def __init__(
        self,
        deps: RunDeps,
        run_id: uuid.UUID,
        *,
        spending: RunSpending | None = None,
        shared: SharedSpend | None = None,
    ) -> None:
        self._deps = deps
        self._run_id = run_id
        self._spending = spending
        self._shared = shared

    async def _reserve_tool_call(self) -> Reservation | None:
        """Reserve one tool call in the shared budget when a scope limits tool calls.

        A scope without room becomes a ``stop`` verdict (the run ends after this tool
        phase) and the call is not run: its result is the refusal.
        """
        shared = self._shared
        if shared is None:
            return None
        try:
            return await shared.reserve_tool_call()
        except BudgetExceeded as refused:
            em = self._deps.observers
            if em.listens("on_budget_exceeded"):
                em.on_budget_exceeded(
                    BudgetExceededContext(
                        run_id=self._run_id,
                        time_ns=now_ns(),
                        limit="tool_calls",
                        value=refused.value,
                        budget=refused.budget,
                        scope="shared",
                        scope_key=refused.scope,
                    )
                )
            raise

    async def __call__(
        self,
        turn: int,
        calls: Sequence[ToolCallPart],
        *,
        received: bool,
        attempts: Sequence[int] | None = None,
    ) -> list[ToolAttempt]:
        """Run ``calls``; their outcomes come back in the model's order.

        ``received``: the calls are a fresh response's (emit ``on_tool_call_received``);
        false when parked calls run again on resume. ``attempts``: each call's
        attempt number (default 0).
        """
        deps = self._deps
        em = deps.observers
        if received and em.listens("on_tool_call_received"):
            for call in calls:
                known = deps.tools.get(call.name)
                em.on_tool_call_received(
                    ToolCallReceivedContext(
                        run_id=self._run_id,
                        time_ns=now_ns(),
                        turn=turn,
                        tool=call.name,
                        tool_call_id=call.id,
                        input=call.arguments,
                        annotations=known.annotations if known is not None else None,
                    )
                )
        parallel = deps.settings.parallel_tool_calls
        results: list[ToolAttempt | None] = [None] * len(calls)
        pending: list[tuple[int, asyncio.Task[ToolAttempt]]] = []
        for index, call in enumerate(calls):
            found = deps.tools.get(call.name)
            if found is None:
                error = ToolNotFound(tool=call.name, available=sorted(deps.tools))
                results[index] = ToolAttempt(
                    ToolResultMessage(
                        tool_call_id=call.id,
                        name=call.name,
                        content=f"Error: {error}",
                        is_error=True,
                    )
                )
                continue
            attempt = attempts[index] if attempts is not None else 0
            task = asyncio.create_task(self._execute(turn, found, call, attempt))
            pending.append((index, task))
            if not parallel:
                await _finish_tasks([task])
        if parallel and pending:
            await _finish_tasks([t for _, t in pending])
        for index, task in pending:
            results[index] = task.result()
        return [r for r in results if r is not None]

    async def _execute(
        self, turn: int, found: Tool, call: ToolCallPart, attempt: int
    ) -> ToolAttempt:
        """One tool call attempt; runs in its own task, which emits its pre and post events."""
        em = self._deps.observers
        if em.listens("on_tool_pre"):
            em.on_tool_pre(
                ToolPreContext(
                    run_id=self._run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    tool=found.name,
                    tool_call_id=call.id,
                    attempt=attempt,
                    tool_description=found.description,
                )
            )
        scope = ToolCallScope(found.name, call.id)
        enter_tool_call(scope)  # this task's own context: nothing to reset
        started = perf()
        error: ToolError | None = None
        returned: ToolReturn | None = None
        timeout = found.timeout if found.timeout is not None else self._deps.settings.tool_timeout
        text: str | None = None
        held: Reservation | None = None
        try:
            held = await self._reserve_tool_call()
            if call.raw_arguments is not None:
                # The raw text is content: the model sees it in the result text below, but
                # the error (whose message reaches span statuses and logs) never holds it.
                raise InvalidToolInput(
                    tool=found.name, errors=["the arguments are not a JSON object"]
                )
            run_sync = functools.partial(self._deps.workers.run, tool=found.name)
            invocation = found.invoke(call.arguments, run_sync=run_sync)
            if timeout is None:
                returned = await invocation
            else:
                returned = await _with_timeout(invocation, timeout)
            if isinstance(returned, Output):
                # Inside the try: a value with no text form is the tool's error, and the
                # attempt still gets its on_tool_post.
                text = render_result(returned.value)
        except asyncio.CancelledError:
            if _cancel_requested():
                self._post(
                    turn, found.name, call.id, attempt, started, None, Cancelled(), None, scope
                )
                raise
            # Nobody cancelled this task: the tool raised CancelledError itself. That is
            # the tool's failure, reported to the model like any other.
            error = ToolExecutionError(
                "CancelledError: the tool raised CancelledError",
                tool=found.name,
                error_type="CancelledError",
            )
        except asyncio.TimeoutError:
            error = ToolTimeout(tool=found.name, timeout_s=timeout or 0.0)
        except ToolError as exc:
            error = exc
        except Exception as exc:
            error = ToolExecutionError(
                f"{type(exc).__name__}: {exc}", tool=found.name, error_type=type(exc).__name__
            )
        finally:
            if held is not None and self._shared is not None:
                await self._shared.settle(held, None, None, tool_calls=1)
        if error is not None:
            text = f"Error: {error}"
            if call.raw_arguments is not None and isinstance(error, InvalidToolInput):
                text += f" (received {call.raw_arguments[:200]!r})"
            self._post(turn, found.name, call.id, attempt, started, text, error, None, scope)
            return ToolAttempt(
                ToolResultMessage(
                    tool_call_id=call.id, name=found.name, content=text, is_error=True
                )
            )
        assert returned is not None
        if isinstance(returned, (Suspend, Sleep)):
            self._post(turn, found.name, call.id, attempt, started, None, None, returned, scope)
            return ToolAttempt(None, park=returned, call=call, attempt=attempt)
        assert text is not None
        self._post(turn, found.name, call.id, attempt, started, text, None, returned, scope)
        return ToolAttempt(ToolResultMessage(tool_call_id=call.id, name=found.name, content=text))

    def _post(
        self,
        turn: int,
        name: str,
        call_id: str,
        attempt: int,
        started: float,
        text: str | None,
        error: LoopError | None,
        returned: ToolReturn | None,
        scope: ToolCallScope,
    ) -> None:
        self._emit_post(turn, name, call_id, attempt, started, text, error, returned, scope)
        spending = self._spending
        if spending is not None:
            spending.tool_call()
            spending.check()

    def _emit_post(
        self,
        turn: int,
        name: str,
        call_id: str,
        attempt: int,
        started: float,
        text: str | None,
        error: LoopError | None,
        returned: ToolReturn | None,
        scope: ToolCallScope,
    ) -> None:
        em = self._deps.observers
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
        em.on_tool_post(
            ToolPostContext(
                run_id=self._run_id,
                time_ns=now_ns(),
                tool_call_id=call_id,
                turn=turn,
                tool=name,
                result_hash=hashing.result_hash(text) if text else None,
                is_error=error is not None,
                duration_ms=(perf() - started) * 1000.0,
                display_hint=returned.display_hint if isinstance(returned, Output) else None,
                attempt=attempt,
                outcome=outcome,
                error=error,
                result=text,
                mcp=scope.mcp,
            )
        )


def _cancel_requested() -> bool:
    """Whether the current task was asked to cancel (True where Python cannot tell)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


if sys.version_info >= (3, 11):  # pragma: no cover - version switch

    async def _with_timeout(awaitable: Awaitable[ToolReturn], timeout: float) -> ToolReturn:
        # asyncio.timeout cancels in place; wait_for would wrap the call in another task.
        async with asyncio.timeout(timeout):
            return await awaitable

else:  # pragma: no cover - version switch

    async def _with_timeout(awaitable: Awaitable[ToolReturn], timeout: float) -> ToolReturn:
        return await asyncio.wait_for(awaitable, timeout)


async def _finish_tasks(tasks: list[asyncio.Task[ToolAttempt]]) -> None:
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
