"""``AgentSession``: a long-lived conversation that runs turns as messages arrive.

The session owns its history (a :class:`~loopobs.loop.run.Conversation` loaded from
and persisted to a :class:`~loopobs.sessions.stores.SessionStore`) and a
background worker that takes sent messages from a bounded inbox, one run at a
time. The ops channel:

- :meth:`~AgentSession.send` queues a user message; its future resolves with
  the run's :class:`~loopobs.loop.run.RunResult`.
- :meth:`~AgentSession.inject` folds text into the next turn: a *hint* reaches
  the next model call (also in the middle of a run) as a system message through
  the context provider ``injected_hint`` (so it is an ``on_context_provider``
  event and span; never history); a *user* message is added before the next
  sent message.
- :meth:`~AgentSession.interrupt` ends the current run at once: every span and
  event is closed as for a cancellation, ``on_run_end`` has status
  ``interrupted``, and the send's future raises :class:`~loopobs.contract.errors.Interrupted`.
- :meth:`~AgentSession.reply` answers the built-in ``ask_user`` tool (which
  gives the model an error result when nobody answers within ``ask_user_timeout``).
- :meth:`~AgentSession.reset` bumps the epoch: the run in progress and every
  queued message of the old epoch are discarded (their futures raise
  :class:`~loopobs.contract.errors.SessionClosed`), the store is cleared, the history
  starts empty; ``on_session_reset`` fires.
- :meth:`~AgentSession.close` does the same without a new epoch, then flushes and
  closes the store. :meth:`~AgentSession.history` and
  :meth:`~AgentSession.subscribe` (change notifications) read the state.

Queues are bounded with a policy: ``block`` (``send`` waits for room),
``drop_oldest`` (the oldest queued item is discarded) or ``reject`` (``send``
raises :class:`~loopobs.contract.errors.QueueFull`). Each outcome is an
``on_backpressure`` event: ``saturated`` once when a queue fills up (again only
after it was empty), ``dropped``, ``rejected``. Subscriber queues always use
``drop_oldest``: a slow subscriber never holds the session up.

Persistence: after each run (whatever its end) the messages the run added are
appended to the store once, and flushed; a user message is persisted by the run
that carried it, never again (an interrupted run's messages are persisted too;
a reset run's are not). The store is an append log: compaction shortens the
live history, not the store. Store calls are serialised (a reset's ``clear``
waits for an append in flight, so it never comes back) and each is bounded by
``store_timeout``. A store that fails (raises or runs past it) fails what needed
it with :class:`~loopobs.sessions.stores.StoreFailed`: the send whose run could
not be saved (its ``result`` holds the run's result; the messages are written
again at the next flush), or ``close`` (after subscribers got ``closed``); the
session goes on serving.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from loopobs.contract.errors import (
    Interrupted,
    QueueFull,
    SessionClosed,
    ToolExecutionError,
    ToolNameClash,
)
from loopobs.contract.events import BackpressureContext, RunStatus, SessionResetContext
from loopobs.contract.model import AssistantMessage, Message, ToolResultMessage, UserMessage
from loopobs.contract.observer import ObserverSet
from loopobs.contract.tools import Tool, current_tool_call
from loopobs.loop.context_providers import ProviderSpec
from loopobs.loop.driver import INTERRUPT
from loopobs.loop.loop import AgentLoop
from loopobs.loop.run import Conversation, RunResult
from loopobs.sessions.stores import (
    MemoryStore,
    SessionStore,
    StateStore,
    StoreCorrupt,
    StoreFailed,
)

__all__ = ["ASK_USER", "AgentSession", "BoundedQueue", "QueuePolicy", "SessionUpdate"]

STATE_VERSION = 1
"""The version of a session's stored detector state (another version is ignored)."""
MAX_STATE_BYTES = 8 * 1024 * 1024
"""A stored detector state larger than this is neither saved nor loaded."""

QueuePolicy = Literal["block", "drop_oldest", "reject"]
"""What a full queue does with a new item: wait for room, drop the oldest, refuse it."""

_T = TypeVar("_T")
logger = logging.getLogger("loopobs.sessions")


class BoundedQueue(Generic[_T]):
    """A FIFO of at most ``capacity`` items with a :data:`QueuePolicy`; reports pushback.

    Emits ``on_backpressure`` (``run_id`` = ``owner``) for ``saturated`` (when it
    fills up; again only after it was empty), ``dropped`` and ``rejected``;
    ``on_drop`` receives a dropped item.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        policy: QueuePolicy,
        emit: ObserverSet,
        owner: uuid.UUID,
        on_drop: Callable[[_T], None] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("a queue's capacity must be at least 1")
        if policy not in ("block", "drop_oldest", "reject"):
            raise ValueError(f"unknown queue policy {policy!r}")
        self.name = name
        self.capacity = capacity
        self.policy: QueuePolicy = policy
        self._emit = emit
        self._owner = owner
        self._on_drop = on_drop
        self._items: collections.deque[_T] = collections.deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._saturated = False
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def _event(self, outcome: Literal["saturated", "dropped", "rejected"]) -> None:
        if self._emit.listens("on_backpressure"):
            self._emit.on_backpressure(
                BackpressureContext(
                    run_id=self._owner,
                    time_ns=time.time_ns(),
                    queue=self.name,
                    outcome=outcome,
                    capacity=self.capacity,
                    policy=self.policy,
                )
            )

    def _added(self) -> None:
        if len(self._items) >= self.capacity and not self._saturated:
            self._saturated = True
            self._event("saturated")

    def put_nowait(self, item: _T) -> bool:
        """Queue ``item`` unless the policy is ``block`` and the queue is full (then False).

        Raises:
            QueueFull: the policy is ``reject`` and the queue is full.
            SessionClosed: the queue is closed.
        """
        if self._closed:
            raise SessionClosed(f"the {self.name} queue is closed")
        if len(self._items) >= self.capacity:
            if self.policy == "block":
                return False
            if self.policy == "reject":
                self._event("rejected")
                raise QueueFull(queue=self.name, capacity=self.capacity)
            dropped = self._items.popleft()
            self._event("dropped")
            if self._on_drop is not None:
                self._on_drop(dropped)
        self._items.append(item)
        self._added()
        self._notify()
        return True

    async def put(self, item: _T) -> None:
        """Queue ``item``, waiting for room under ``block``."""
        while not self.put_nowait(item):
            await self._wait()

    async def get(self) -> _T:
        """The oldest item, waiting for one.

        Raises:
            SessionClosed: the queue was closed (and is empty).
        """
        while not self._items:
            if self._closed:
                raise SessionClosed(f"the {self.name} queue is closed")
            await self._wait()
        item = self._items.popleft()
        if not self._items:
            self._saturated = False  # drained: the next filling reports again
        self._notify()
        return item

    def clear(self) -> list[_T]:
        """Remove and return every queued item."""
        items = list(self._items)
        self._items.clear()
        self._saturated = False
        self._notify()
        return items

    def close(self) -> None:
        """Refuse new items; ``get`` raises once the queue is empty."""
        self._closed = True
        self._notify()

    async def _wait(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _notify(self) -> None:
        # Every waiter re-checks its condition, so waking them all is correct.
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


UpdateKind = Literal["message", "ask_user", "run_end", "reset", "closed"]


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """One change of a session, as :meth:`AgentSession.subscribe` delivers it.

    ``message``: a message joined the history (``message`` set); ``ask_user``: the
    model asks a question (``call_id`` and ``text``; answer with ``reply``);
    ``run_end``: a run ended (``status``); ``reset``: a new epoch began;
    ``closed``: the session closed (the last update).
    """

    kind: UpdateKind
    epoch: int
    message: Message | None = None
    text: str | None = None
    call_id: str | None = None
    status: RunStatus | None = None


@dataclass(slots=True)
class _Sent:
    text: str
    epoch: int
    future: asyncio.Future[RunResult] = field(repr=False)


_ACTIVE: contextvars.ContextVar[AgentSession | None] = contextvars.ContextVar(
    "loopobs_agent_session", default=None
)


async def _ask_user(question: str) -> str:
    """Ask the user a question and wait for the answer (only inside an AgentSession)."""
    session = _ACTIVE.get()
    scope = current_tool_call()
    if session is None or scope is None:
        raise ToolExecutionError(
            "ask_user works only in an AgentSession", tool="ask_user", error_type="NoSession"
        )
    return await session._ask(scope.tool_call_id, question)


async def _injected_hints(query: str) -> str | None:
    """The hints injected into the running session since its last model call."""
    session = _ACTIVE.get()
    if session is None or not session._hints:
        return None
    text = "\n".join(session._hints)
    session._hints.clear()
    return text


HINTS = ProviderSpec(_injected_hints, "injected_hint", quiet_when_empty=True)
"""The context provider an :class:`AgentSession` adds to its loop: its injected hints."""


if TYPE_CHECKING:
    ASK_USER: Tool
    """The built-in ``ask_user`` tool an :class:`AgentSession` adds to its loop.

    Its own timeout is the session's ``ask_user_timeout``; the tool timeout here
    only keeps the loop's shorter default from cutting a question short."""


_ASK_USER_LOCK = threading.Lock()
_ask_user_built: list[Tool] = []


def _ask_user_tool() -> Tool:
    # Built on first use (the module's ASK_USER, or a session): building a tool's
    # argument model loads pydantic, which `import loopobs` does not need. Built once
    # across threads: a session refuses an `ask_user` tool that is not this very one.
    if not _ask_user_built:
        with _ASK_USER_LOCK:
            if not _ask_user_built:
                _ask_user_built.append(Tool(_ask_user, name="ask_user", timeout=7 * 24 * 3600.0))
    return _ask_user_built[0]


def __getattr__(name: str) -> Any:
    if name == "ASK_USER":
        return _ask_user_tool()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "ASK_USER"})


class AgentSession:
    """A background conversation on ``loop``: see the module docs for the ops channel.

    Use ``async with AgentSession(loop) as session:`` (or :meth:`start` and
    :meth:`close`). Events go to the loop's observers.

    Args:
        loop: runs the turns (the session adds the ``ask_user`` tool to it).
        store: the history's store (default: a :class:`MemoryStore`).
        session_id: the conversation to load from the store (default: a new one).
        queue_size: messages the inbox holds.
        queue_policy: what a full inbox does with one more (:data:`QueuePolicy`).
        subscriber_queue_size: updates buffered per subscriber (oldest dropped).
        ask_user_timeout: seconds ``ask_user`` waits for :meth:`reply`.
        store_timeout: seconds one store call may take before it counts as failed.
        attribution: who the conversation is for (``{"tenant": …, "user": …}``), on
            every run (see ``Conversation(attribution=...)``).
        detector_state: save the detectors' state of the conversation in the store after
            each run and restore it at ``start`` (the store must keep state: see
            :class:`~loopobs.sessions.stores.StateStore`). ``None`` (the default): when a
            ``store`` is given, not for the session's own in-memory store, which nobody
            else can reopen. A save costs about 0.1 ms for a short session and 2.5 ms
            for one that filled the repetition detector's default ``memory``.

    Raises:
        ValueError: ``store_timeout`` is not a positive, finite number, or
            ``attribution`` is not a small mapping of short strings.
    """

    def __init__(
        self,
        loop: AgentLoop,
        *,
        store: SessionStore | None = None,
        session_id: uuid.UUID | None = None,
        queue_size: int = 16,
        queue_policy: QueuePolicy = "block",
        subscriber_queue_size: int = 256,
        ask_user_timeout: float = 300.0,
        store_timeout: float = 30.0,
        attribution: Mapping[str, str] | None = None,
        detector_state: bool | None = None,
    ) -> None:
        if not (isinstance(store_timeout, (int, float)) and 0 < store_timeout < math.inf):
            raise ValueError(
                f"store_timeout must be a positive number of seconds, not {store_timeout!r}"
            )
        ask_user = _ask_user_tool()
        existing = loop.tools.get("ask_user")
        if existing is not None and existing is not ask_user:
            raise ToolNameClash(tool="ask_user")
        loop.tools["ask_user"] = ask_user
        if HINTS not in loop.context_providers:
            loop.context_providers = (*loop.context_providers, HINTS)
        self.loop = loop
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.id = session_id or uuid.uuid4()
        self.ask_user_timeout = ask_user_timeout
        self.store_timeout = store_timeout
        self._store_lock = asyncio.Lock()
        self.subscriber_queue_size = subscriber_queue_size
        self.epoch = 0
        self._emit: ObserverSet = loop.observers
        self._inbox: BoundedQueue[_Sent] = BoundedQueue(
            "inbox", queue_size, queue_policy, self._emit, self.id, on_drop=self._discard
        )
        self.attribution: dict[str, str] = dict(attribution or {})
        """Who the conversation is for (on every run's ``on_run_start``)."""
        self._session = Conversation(id=self.id, attribution=self.attribution)
        self._persisted: list[Message] = []  # strong refs: their ids stay unique
        self._persisted_ids: set[int] = set()
        self._pending_users: list[str] = []
        self._hints: list[str] = []
        self._questions: dict[str, asyncio.Future[str]] = {}
        self._subscribers: list[BoundedQueue[SessionUpdate]] = []
        self._current: asyncio.Task[RunResult] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.state_errors = 0
        """Detector state saves and loads that failed (logged; never a send's failure)."""
        self.detector_state = store is not None if detector_state is None else detector_state
        """Whether the detectors' state is saved in the store and restored from it."""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> AgentSession:
        """Load the history from the store and start the worker.

        Raises:
            StoreFailed: the store's ``load`` failed (``StoreCorrupt``: a malformed line).
        """
        if self._worker is not None:
            return self
        history = await self._store_call("load", self.store.load(self.id))
        self._session = Conversation(id=self.id, messages=history, attribution=self.attribution)
        self._remember(history)
        await self._restore_detectors()
        self._worker = asyncio.create_task(self._work())
        return self

    async def __aenter__(self) -> AgentSession:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Interrupt the run in progress, discard queued messages, persist, flush, close the store.

        Idempotent. The interrupted run's messages are persisted. Subscribers get
        ``closed`` whatever the store does.

        Raises:
            StoreFailed: persisting or closing the store failed (the session is closed).
        """
        if self._closed:
            return
        self._closed = True
        for sent in self._inbox.clear():
            self._discard(sent)
        self._inbox.close()
        self._stop_current()
        failure: StoreFailed | None = None
        try:
            if self._worker is not None:
                await asyncio.gather(self._worker, return_exceptions=True)
            failure = await self._persist(self._session)
            try:
                await self._store_call("close", self.store.close())
            except StoreFailed as exc:
                failure = failure or exc
        finally:
            self._publish(SessionUpdate("closed", self.epoch))
            for queue in self._subscribers:
                queue.close()
        if failure is not None:
            raise failure

    async def reset(self) -> None:
        """Start a new epoch: discard the run in progress and queued messages, clear the store.

        The clear waits for a store call in flight (an append of the old epoch never
        outlives it). ``on_session_reset`` and the ``reset`` update come first.

        Raises:
            StoreFailed: the store's ``clear`` failed (the old messages may load again).
        """
        self._check_open()
        self.epoch += 1
        discarded = self._inbox.clear()
        for sent in discarded:
            self._discard(sent)
        self._pending_users.clear()
        self._hints.clear()
        old = self._session
        self._session = Conversation(id=self.id, attribution=self.attribution)
        self._persisted.clear()
        self._persisted_ids.clear()
        current = self._stop_current()
        if current is not None:
            await asyncio.wait({current})
        del old
        if self._emit.listens("on_session_reset"):
            self._emit.on_session_reset(
                SessionResetContext(
                    run_id=self.id,
                    time_ns=time.time_ns(),
                    epoch=self.epoch,
                    discarded=len(discarded) + (current is not None),
                )
            )
        self._publish(SessionUpdate("reset", self.epoch))
        async with self._store_lock:
            await self._store_call("clear", self.store.clear(self.id))

    # -- the ops channel -------------------------------------------------------------------
    async def send(self, text: str) -> asyncio.Future[RunResult]:
        """Queue ``text`` as a user message; the future resolves with its run's result.

        Raises:
            TypeError: ``text`` is not a string.
            QueueFull: the inbox is full and its policy is ``reject``.
            SessionClosed: the session is closed.
        """
        _check_text(text)
        self._check_open()
        future: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        await self._inbox.put(_Sent(text, self.epoch, future))
        return future

    def inject(self, text: str, *, kind: Literal["hint", "user"] = "hint") -> None:
        """Fold ``text`` into the next turn: a hint for the next model call, or a user message.

        A hint reaches the next model call (the current run's next turn, if one is
        running) as a system message, and is not kept in the history; a user
        message is added to the history just before the next sent message.

        Raises:
            TypeError: ``text`` is not a string.
        """
        _check_text(text)
        self._check_open()
        if kind == "hint":
            self._hints.append(text)
        elif kind == "user":
            self._pending_users.append(text)
        else:
            raise ValueError(f"unknown injection kind {kind!r}")

    def interrupt(self) -> bool:
        """End the current run now (status ``interrupted``); False if none is running."""
        return self._stop_current() is not None

    def reply(self, call_id: str, answer: str) -> bool:
        """Answer the ``ask_user`` call ``call_id``; False if it is not waiting (any more)."""
        future = self._questions.get(call_id)
        if future is None or future.done():
            return False
        future.set_result(answer)
        return True

    def history(self) -> list[Message]:
        """The conversation as the next model call will see it (a copy)."""
        return list(self._session.messages)

    @property
    def running(self) -> bool:
        """Whether a run is in progress."""
        return self._current is not None and not self._current.done()

    @property
    def questions(self) -> dict[str, str]:
        """Open ``ask_user`` calls: call id → question."""
        return {
            cid: getattr(f, "question", "") for cid, f in self._questions.items() if not f.done()
        }

    async def subscribe(self) -> AsyncIterator[SessionUpdate]:
        """Updates from now on, until the session closes (the ``closed`` update is the last)."""
        queue: BoundedQueue[SessionUpdate] = BoundedQueue(
            "subscriber", self.subscriber_queue_size, "drop_oldest", self._emit, self.id
        )
        self._subscribers.append(queue)
        try:
            while True:
                try:
                    update = await queue.get()
                except SessionClosed:
                    return
                yield update
                if update.kind == "closed":
                    return
        finally:
            if queue in self._subscribers:
                self._subscribers.remove(queue)

    # -- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("the session is closed")

    def _publish(self, update: SessionUpdate) -> None:
        for queue in list(self._subscribers):
            with contextlib.suppress(SessionClosed):
                queue.put_nowait(update)

    def _discard(self, sent: _Sent) -> None:
        if not sent.future.done():
            sent.future.set_exception(SessionClosed("the message was discarded before its run"))
            sent.future.exception()  # retrieved: nobody may be waiting on it

    def _stop_current(self) -> asyncio.Task[RunResult] | None:
        current = self._current
        if current is None or current.done():
            return None
        current.cancel(INTERRUPT)
        return current

    def _remember(self, messages: list[Message]) -> None:
        for message in messages:
            if id(message) not in self._persisted_ids:
                self._persisted_ids.add(id(message))
                self._persisted.append(message)

    async def _store_call(self, operation: str, call: Awaitable[_T]) -> _T:
        """``call`` under ``store_timeout``; its failure as :class:`StoreFailed`."""
        deadline = asyncio.timeout(self.store_timeout)
        try:
            async with deadline:
                return await call
        except (StoreFailed, StoreCorrupt):
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                raise StoreFailed(
                    f"the session store's {operation} did not finish within "
                    f"{self.store_timeout:g}s",
                    operation=operation,
                ) from None
            raise StoreFailed(
                f"the session store's {operation} failed: {type(exc).__name__}: {exc}",
                operation=operation,
            ) from exc

    async def _persist(self, session: Conversation) -> StoreFailed | None:
        """Append the messages ``session`` added and flush; the store's failure, if any."""
        async with self._store_lock:
            if session is not self._session:
                return None  # a run of an old epoch (checked again: a reset may have waited)
            try:
                new = [m for m in session.messages if id(m) not in self._persisted_ids]
                if new:
                    await self._store_call("append", self.store.append(self.id, new))
                    if session is self._session:  # a reset meanwhile forgot the old epoch
                        self._remember(new)  # appended: the store holds them until flushed
                await self._store_call("flush", self.store.flush())
            except StoreFailed as exc:
                return exc
            return None

    # -- detector state ----------------------------------------------------------------------
    def _stateful(self) -> list[tuple[str, Any]]:
        """The loop's detectors that snapshot their state, each under a unique name."""
        out: list[tuple[str, Any]] = []
        names: set[str] = set()
        for detector in self.loop.detectors:
            if not callable(getattr(detector, "snapshot", None)):
                continue
            if not getattr(detector, "snapshot_kind", ""):
                continue
            name = base = type(detector).__name__
            n = 1
            while name in names:
                n += 1
                name = f"{base}#{n}"
            names.add(name)
            out.append((name, detector))
        return out

    async def _save_detectors(self) -> None:
        """Save this session's detector state in the store (never raises)."""
        store = self.store
        if not self.detector_state or not isinstance(store, StateStore):
            return
        detectors = self._stateful()
        if not detectors:
            return
        try:
            snapshots = {name: d.snapshot(self.id) for name, d in detectors}
            data = json.dumps(
                {"v": STATE_VERSION, "detectors": snapshots}, separators=(",", ":")
            ).encode()
            if len(data) > MAX_STATE_BYTES:
                raise ValueError(f"the state is {len(data)} bytes, over {MAX_STATE_BYTES}")
            async with self._store_lock:
                await self._store_call("save_state", store.save_state(self.id, data))
        except (StoreFailed, StoreCorrupt, ValueError, TypeError) as exc:
            self.state_errors += 1
            logger.warning(
                "session %s: the detector state was not saved (%s); the history is", self.id, exc
            )

    async def _restore_detectors(self) -> None:
        """Restore this session's detector state from the store; fresh state if it cannot."""
        store = self.store
        if not self.detector_state or not isinstance(store, StateStore):
            return
        detectors = self._stateful()
        if not detectors:
            return
        try:
            raw = await self._store_call("load_state", store.load_state(self.id))
        except (StoreFailed, StoreCorrupt) as exc:
            self.state_errors += 1
            logger.warning(
                "session %s: the detector state could not be loaded (%s); detectors start fresh",
                self.id,
                exc,
            )
            return
        if raw is None:
            return
        try:
            if len(raw) > MAX_STATE_BYTES:
                raise ValueError(f"{len(raw)} bytes, over {MAX_STATE_BYTES}")
            stored = json.loads(raw)
            if not isinstance(stored, dict) or stored.get("v") != STATE_VERSION:
                version = stored.get("v") if isinstance(stored, dict) else None
                raise ValueError(f"version {version!r}, not {STATE_VERSION}")
            snapshots = stored.get("detectors")
            if not isinstance(snapshots, dict):
                raise ValueError("no detectors")
        except (ValueError, UnicodeDecodeError) as exc:
            logger.warning(
                "session %s: ignored the stored detector state (%s); detectors start fresh",
                self.id,
                exc,
            )
            return
        for name, detector in detectors:
            snapshot = snapshots.get(name)
            if snapshot is not None:
                detector.restore(self.id, snapshot)

    async def _ask(self, call_id: str, question: str) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.question = question  # type: ignore[attr-defined]
        self._questions[call_id] = future
        self._publish(SessionUpdate("ask_user", self.epoch, text=question, call_id=call_id))
        try:
            return await asyncio.wait_for(future, self.ask_user_timeout)
        except asyncio.TimeoutError:
            raise ToolExecutionError(
                f"the user did not answer within {self.ask_user_timeout:g}s",
                tool="ask_user",
                error_type="NoAnswer",
            ) from None
        finally:
            self._questions.pop(call_id, None)

    async def _work(self) -> None:
        while True:
            try:
                sent = await self._inbox.get()
            except SessionClosed:
                return
            if sent.epoch != self.epoch:
                self._discard(sent)
                continue
            try:
                await self._run(sent)
            except Exception as exc:  # the worker must go on serving
                if not sent.future.done():
                    sent.future.set_exception(exc)
                    sent.future.exception()

    async def _run(self, sent: _Sent) -> None:
        session = self._session
        epoch = self.epoch
        inputs: list[Message] = [UserMessage(content=t) for t in self._pending_users]
        self._pending_users.clear()
        inputs.append(UserMessage(content=sent.text))
        before = len(session.messages)

        async def run() -> RunResult:
            _ACTIVE.set(self)  # this task's own context: ask_user finds its session
            return await self.loop.run(inputs, session=session)

        task = asyncio.create_task(run())
        self._current = task
        try:
            await asyncio.wait({task})
        finally:
            self._current = None
        _close_open_calls(session)
        for message in session.messages[before:] if epoch == self.epoch else ():
            self._publish(SessionUpdate("message", epoch, message=message))
        failure = await self._persist(session)
        if epoch == self.epoch:
            await self._save_detectors()
        outcome: RunResult | BaseException
        if task.cancelled():
            discarded = epoch != self.epoch or self._closed
            outcome = (
                SessionClosed("the run was discarded (reset or close)")
                if discarded
                else Interrupted()
            )
            status = RunStatus.INTERRUPTED
        elif (exc := task.exception()) is not None:
            outcome, status = exc, RunStatus.FAILED
        else:
            outcome = task.result()
            status = outcome.status
        if failure is not None and isinstance(outcome, RunResult):
            failure.result = outcome
            outcome = failure
        elif failure is not None:  # the run's own end says more; the store's is logged
            logger.warning("session %s: %s", self.id, failure)
        if not sent.future.done():
            if isinstance(outcome, BaseException):
                sent.future.set_exception(outcome)
                sent.future.exception()  # retrieved: no warning when nobody awaits the reply
            else:
                sent.future.set_result(outcome)
        self._publish(SessionUpdate("run_end", epoch, status=status))


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"a session message must be text (str), not {type(text).__name__}")


def _close_open_calls(session: Conversation) -> None:
    """Give every tool call of an interrupted turn an error result, so the history stays valid.

    Models require a result for each call of an assistant message; a run stopped in
    its tool phase leaves the calls without one.
    """
    answered: set[str] = set()
    for message in reversed(session.messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
            continue
        if isinstance(message, AssistantMessage) and message.tool_calls:
            session.messages.extend(
                ToolResultMessage(
                    tool_call_id=c.id,
                    name=c.name,
                    is_error=True,
                    content="Error: interrupted before the tool finished",
                )
                for c in message.tool_calls
                if c.id not in answered
            )
        return
