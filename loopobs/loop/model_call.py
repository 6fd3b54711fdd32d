"""The model call of a turn: the fallback chain, each attempt one streamed call.

:class:`ModelCall` tries the turn's model, then each fallback model in order
while attempts fail with a retryable :class:`~loopobs.contract.errors.ModelError`.
Each attempt emits ``on_stream_start`` and then exactly one of
``on_stream_success`` / ``on_stream_failure`` (also when cancelled), from the
task that iterates the stream; deltas are emitted as they arrive. A successful
attempt is followed by ``on_response`` and updates the session's token
bookkeeping; the detector notes it carried are then spent.

Budgets: before every attempt — the first and each fallback — the request that
attempt really sends (the conversation, this turn's context texts and pending
notes) is estimated and checked (:meth:`ModelCall.check_budget`); a stop means
the attempt is not made (:class:`~loopobs.loop.policy.Stopped` is raised, and no
``on_fallback`` is emitted for a refused fallback). Each attempt counts in the
run's spending; an attempt that reported its usage is priced — also when the
stream was then cut off: what was reported is what it cost — and a successful
one carries the cost on its ``on_stream_success``. The budgets are checked after
the ``on_response``. A reported count that is implausible makes the cost unknown.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loopobs.contract.compaction import estimate_tokens
from loopobs.contract.errors import (
    BudgetExceeded,
    Cancelled,
    FallbackExhausted,
    LoopError,
    ModelError,
    StreamError,
)
from loopobs.contract.events import (
    BudgetExceededContext,
    FallbackContext,
    ModelSwitchedContext,
    ResponseContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    Usage,
)
from loopobs.contract.model import (
    Finish,
    Message,
    ModelRequest,
    SystemMessage,
    TextDelta,
    ThinkingBlock,
    ThinkingBlockReady,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    UsageReport,
    UserMessage,
)
from loopobs.contract.token_counts import plausible_usage
from loopobs.cost.shared import Reservation
from loopobs.cost.spending import RunSpending
from loopobs.loop.compaction import estimate_request
from loopobs.loop.policy import Stop, Stopped
from loopobs.loop.run import Conversation
from loopobs.loop.runtime import RunDeps, now_ns, perf
from loopobs.loop.shared_spend import SharedSpend

__all__ = ["ModelCall", "ModelResponse", "distinct_call_ids", "note_model"]


@dataclass(slots=True)
class ModelResponse:
    """What a successful model call produced."""

    text: str
    thinking: str | None
    """The reasoning text; None when the model streamed none."""
    calls: list[ToolCallPart]
    usage: Usage | None
    """As the provider reported it; None when it reported nothing."""
    blocks: tuple[ThinkingBlock, ...] = ()
    cost_usd: float | None = None
    """USD of the turn's attempts that reported usage (the cut-off ones too); None when
    some price is unknown."""


def distinct_call_ids(calls: Sequence[ToolCallPart]) -> list[ToolCallPart]:
    """``calls`` with every id unique within the response.

    A model may send the same id twice (or reuse an empty one); the loop's events,
    spans and results are paired by id, so a repeat gets ``<id>_<n>``, with the
    lowest ``n`` that no call of the response uses. The first call keeps its id,
    and the renamed id is the one the conversation carries back to the model.
    """
    taken = {call.id for call in calls}
    if len(taken) == len(calls):
        return list(calls)
    seen: set[str] = set()
    distinct: list[ToolCallPart] = []
    for call in calls:
        kept = call
        if call.id in seen:
            n = 2
            while f"{call.id}_{n}" in taken:
                n += 1
            kept = dataclasses.replace(call, id=f"{call.id}_{n}")
            taken.add(kept.id)
        seen.add(kept.id)
        distinct.append(kept)
    return distinct


def _server(client: object) -> tuple[str | None, int | None]:
    """The client's ``server_address`` and ``server_port``, when it has well-typed ones."""
    address = getattr(client, "server_address", None)
    port = getattr(client, "server_port", None)
    return (
        address if isinstance(address, str) and address else None,
        port if isinstance(port, int) and not isinstance(port, bool) else None,
    )


def _sent_options(client: object, options: Mapping[str, Any]) -> Mapping[str, Any]:
    """The options a call sends: the client's ``default_options`` under the request's own."""
    defaults = getattr(client, "default_options", None)
    if not isinstance(defaults, Mapping) or not defaults:
        return options
    return {**defaults, **options}


def note_model(deps: RunDeps, run_id: uuid.UUID, session: Conversation, model: str) -> None:
    """Record ``model`` as the session's current one; emit ``on_model_switched`` if it changed."""
    previous = session.last_model
    session.last_model = model
    if previous is not None and previous != model:
        em = deps.observers
        if em.listens("on_model_switched"):
            em.on_model_switched(
                ModelSwitchedContext(
                    run_id=run_id, time_ns=now_ns(), from_model=previous, to_model=model
                )
            )


class ModelCall:
    """Calls the model for the turns of one run, with fallback.

    ``spending`` is the run's (without one, calls are priced but no budget applies).
    """

    __slots__ = ("_costs", "_deps", "_run_id", "_session", "_shared", "_spending")

    def __init__(
        self,
        deps: RunDeps,
        run_id: uuid.UUID,
        session: Conversation,
        *,
        spending: RunSpending | None = None,
        shared: SharedSpend | None = None,
    ) -> None:
        self._deps = deps
        self._shared = shared
        self._run_id = run_id
        self._session = session
        self._spending = (
            spending
            if spending is not None
            else RunSpending(
                run_id=run_id,
                prices=deps.prices,
                budget=None,
                session=session,
                emit=deps.observers.on_budget_exceeded,
                on_unpriced=(
                    deps.observers.on_budget_unpriced
                    if deps.observers.listens("on_budget_unpriced")
                    else None  # the warning is logged all the same; no context is built
                ),
            )
        )
        self._costs: list[float | None] = []
        """The priced attempts of the current turn's call."""

    def estimate(self) -> int:
        """The input tokens of the request the next attempt sends, estimated.

        The conversation as :func:`~loopobs.loop.compaction.estimate_request` counts
        it (the provider's last count stood for that call's context texts and
        notes too: those are taken out), plus this turn's context texts and notes.
        """
        session = self._session
        extra = self._extra_tokens()
        base = estimate_request(session, self._deps.tool_definitions)
        if session.last_input_tokens is not None:
            base = max(0, base - session.extra_tokens_at_last_usage)
        return base + extra

    def _extra_tokens(self) -> int:
        session = self._session
        extra: list[Message] = [SystemMessage(content=t) for t in session.context_texts]
        extra.extend(UserMessage(content=n) for n in session.pending_notes)
        return estimate_tokens(extra) if extra else 0

    def check_budget(self, model: str) -> Stop | None:
        """Check the budgets for one more call to ``model``; the stop if it must not be made.

        The check emits its verdicts, and the policy applies them, as any other.
        """
        spending = self._spending
        if not spending.budgeted:
            return None
        provider = getattr(self._deps.client, "provider", "")
        spending.before_call(model, provider, spending.estimate(self.estimate()))
        return self._deps.policy.apply(self._run_id, self._session)

    async def _reserve_shared(
        self, model: str, provider: str, request: ModelRequest
    ) -> Reservation | None:
        """Reserve the attempt's worst case in the shared budget (None: none to settle).

        A scope without room becomes a ``stop`` verdict (``scope="shared"``), applied by
        the policy as any budget stop.

        Raises:
            Stopped: a shared scope has no room for the call.
            BudgetUnavailable: the ledger did not answer and the policy is ``fail_closed``.
        """
        shared = self._shared
        if shared is None:
            return None
        try:
            return await shared.reserve_model_call(
                model, provider, self.estimate(), request.options
            )
        except BudgetExceeded as refused:
            em = self._deps.observers
            if em.listens("on_budget_exceeded"):
                em.on_budget_exceeded(
                    BudgetExceededContext(
                        run_id=self._run_id,
                        time_ns=now_ns(),
                        limit=refused.limit,  # type: ignore[arg-type]
                        value=refused.value,
                        budget=refused.budget,
                        scope="shared",
                        scope_key=refused.scope,
                    )
                )
            stop = self._deps.policy.apply(self._run_id, self._session)
            if stop is None:  # nobody applies verdicts: the call still must not be made
                raise
            raise Stopped(stop) from None

    def _refuse_over_budget(self, model: str) -> None:
        stop = self.check_budget(model)
        if stop is not None:
            raise Stopped(stop)

    async def __call__(self, turn: int, model: str) -> ModelResponse:
        """Call ``model``, then the fallbacks; the first successful response wins.

        Raises:
            ModelError: a non-retryable failure (no fallback is tried), or the only
                model's failure when there are no fallbacks.
            Stopped: a budget refused the attempt (the first or a fallback).
            FallbackExhausted: every model of the chain failed with a retryable error;
                it carries each attempt's error.
        """
        chain = [model, *(m for m in self._deps.settings.fallback_models if m != model)]
        failures: list[ModelError] = []
        self._costs = []
        self._refuse_over_budget(model)
        for attempt, current in enumerate(chain):
            try:
                return await self._stream(turn, current, attempt)
            except ModelError as exc:
                failures.append(exc)
                if not exc.retryable or len(chain) == 1:
                    raise
                if attempt + 1 == len(chain):
                    raise FallbackExhausted(
                        models=chain, failures=failures, provider=exc.provider
                    ) from exc
                following = chain[attempt + 1]
                self._refuse_over_budget(following)
                em = self._deps.observers
                if em.listens("on_fallback"):
                    em.on_fallback(
                        FallbackContext(
                            run_id=self._run_id,
                            time_ns=now_ns(),
                            from_model=current,
                            to_model=following,
                            turn=turn,
                        )
                    )
                self._session.last_model = current
                note_model(self._deps, self._run_id, self._session, following)
        raise AssertionError("unreachable: the chain is never empty")  # pragma: no cover

    def request(self, model: str) -> ModelRequest:
        """The request for ``model``: the conversation, pending notes last, and the tools."""
        session = self._session
        messages: list[Message] = list(session.messages)
        messages.extend(SystemMessage(content=t) for t in session.context_texts)
        messages.extend(UserMessage(content=n) for n in session.pending_notes)
        return ModelRequest(
            model=model,
            messages=tuple(messages),
            tools=self._deps.tool_definitions,
            options=self._deps.settings.request_options,
        )

    async def _stream(self, turn: int, model: str, attempt: int) -> ModelResponse:
        deps = self._deps
        em = deps.observers
        client = deps.client
        provider = getattr(client, "provider", "")
        server = _server(client)
        run_id = self._run_id
        request = self.request(model)
        sent_messages = len(self._session.messages)
        sent_extra = self._extra_tokens()
        held = await self._reserve_shared(model, provider, request)
        spending = self._spending
        spending.model_call()
        if em.listens("on_stream_start"):
            em.on_stream_start(
                StreamStartContext(
                    run_id=run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    model=model,
                    provider=provider,
                    attempt=attempt,
                    request_options=_sent_options(client, request.options),
                    server_address=server[0],
                    server_port=server[1],
                    stream=True,  # every call of the loop streams
                )
            )
        started = perf()
        first: float | None = None
        text: list[str] = []
        thinking: list[str] | None = None
        calls: list[ToolCallPart] = []
        blocks: list[ThinkingBlock] = []
        usage: Usage | None = None
        usage_known = True
        finish: Finish | None = None
        stream: Any = None
        try:
            try:
                stream = client.stream(request)
                async for event in stream:
                    if first is None:
                        first = perf()
                    if isinstance(event, TextDelta):
                        text.append(event.text)
                        if em.listens("on_text_delta"):
                            em.on_text_delta(
                                TextDeltaContext(
                                    run_id=run_id, time_ns=now_ns(), turn=turn, delta=event.text
                                )
                            )
                    elif isinstance(event, ThinkingDelta):
                        thinking = thinking if thinking is not None else []
                        thinking.append(event.text)
                        if em.listens("on_thinking_delta"):
                            em.on_thinking_delta(
                                ThinkingDeltaContext(
                                    run_id=run_id, time_ns=now_ns(), turn=turn, delta=event.text
                                )
                            )
                    elif isinstance(event, ToolCallReady):
                        calls.append(event.call)
                    elif isinstance(event, ThinkingBlockReady):
                        blocks.append(event.block)
                    elif isinstance(event, UsageReport):
                        usage, dropped = plausible_usage(event.usage)
                        usage_known = dropped == 0
                    elif isinstance(event, Finish):
                        finish = event
                if finish is None:
                    raise StreamError(
                        "the model stream ended before its final event", provider=provider
                    )
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except BaseException as exc:
            cut_cost = None
            if usage is not None:
                # The provider reported what the call used before it was cut off: it is
                # billed for that, so the budget and the run's cost count it.
                cut_cost = spending.price(model, provider, usage, known=usage_known)
                self._costs.append(cut_cost)
            if self._shared is not None:
                await self._shared.settle(held, usage, cut_cost)
            if isinstance(exc, asyncio.CancelledError):
                self._failed(turn, model, provider, attempt, started, Cancelled(), server)
                raise
            if isinstance(exc, LoopError):
                self._failed(turn, model, provider, attempt, started, exc, server)
                raise
            if not isinstance(exc, Exception):
                raise
            err = ModelError(
                f"the model client raised {type(exc).__name__}: {exc}",
                retryable=False,
                provider=provider,
            )
            self._failed(turn, model, provider, attempt, started, err, server)
            raise err from exc
        ended = perf()
        session = self._session
        if usage is not None and usage.input_tokens > 0:
            session.last_input_tokens = usage.input_tokens
            session.messages_at_last_usage = sent_messages
            session.extra_tokens_at_last_usage = sent_extra
        session.pending_notes.clear()
        response_text = "".join(text)
        cost = spending.price(model, provider, usage, finish.response_model, known=usage_known)
        self._costs.append(cost)
        if self._shared is not None:
            await self._shared.settle(held, usage, cost)
        if em.listens("on_stream_success"):
            u = usage or Usage()
            em.on_stream_success(
                StreamSuccessContext(
                    run_id=run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    model=model,
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    provider=provider,
                    attempt=attempt,
                    duration_ms=(ended - started) * 1000.0,
                    time_to_first_token_ms=(first - started) * 1000.0
                    if first is not None
                    else None,
                    finish_reason=finish.reason,
                    response_id=finish.response_id,
                    response_model=finish.response_model,
                    cache_read_input_tokens=u.cache_read_input_tokens,
                    cache_write_input_tokens=u.cache_write_input_tokens,
                    reasoning_output_tokens=u.reasoning_output_tokens,
                    cost_usd=cost,
                    usage_reported=usage is not None,
                    usage_details=u.details,
                    server_address=server[0],
                    server_port=server[1],
                    service_tier=finish.service_tier,
                    system_fingerprint=finish.system_fingerprint,
                )
            )
        if em.listens("on_response"):
            em.on_response(
                ResponseContext(
                    run_id=run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    text=response_text,
                    usage=usage,
                    tool_calls=len(calls),
                )
            )
        spending.check()
        costs = self._costs
        turn_cost = None if None in costs else sum(c for c in costs if c is not None)
        return ModelResponse(
            response_text,
            "".join(thinking) if thinking is not None else None,
            distinct_call_ids(calls),
            usage,
            tuple(blocks),
            turn_cost,
        )

    def _failed(
        self,
        turn: int,
        model: str,
        provider: str,
        attempt: int,
        started: float,
        error: LoopError,
        server: tuple[str | None, int | None],
    ) -> None:
        em = self._deps.observers
        if em.listens("on_stream_failure"):
            em.on_stream_failure(
                StreamFailureContext(
                    run_id=self._run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    model=model,
                    error=error,
                    provider=provider,
                    attempt=attempt,
                    duration_ms=(perf() - started) * 1000.0,
                    server_address=server[0],
                    server_port=server[1],
                )
            )
