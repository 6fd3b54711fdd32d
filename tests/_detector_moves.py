"""A looping conversation that can move between workers: the pieces the tests share.

Each sent message is one run: the model asks for the same ``lookup`` and then answers,
so the repetition detector's streak grows across the runs of the session and stops a
run once it is long enough. :func:`send_all` runs some of the messages on one
``AgentSession`` and returns what each run ended with and detected.
"""

from __future__ import annotations

import uuid
from typing import Any

from loopobs import AgentLoop, AgentSession, ConvergenceDetector, RepetitionDetector, tool
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.sessions.stores import SessionStore
from loopobs.testing import RecordingObserver

SENDS = 12
"""Messages of the whole conversation (the repetition detector stops it before the end)."""


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: pending, no change since yesterday"


def step(request: Any) -> Any:
    if request.messages and request.messages[-1].role == "tool":
        return Reply(text=f"still pending ({len(request.messages)})")
    return Reply(tool_calls=(ToolCall("lookup", {"order": "17"}),))


def same_answer(request: Any) -> Any:
    """A model that gives the same answer every time."""
    return Reply(
        text="Order 17 is still pending after my last check: the warehouse has not "
        "confirmed the shipment yet, so I will look again tomorrow morning and tell you "
        "as soon as anything changes."
    )


Verdict = tuple[str, tuple[tuple[str, str, int], ...]]


async def send_all(
    store: SessionStore, session_id: uuid.UUID, texts: list[str], *, converge: bool = False
) -> tuple[list[Verdict], int]:
    """Send ``texts`` on a fresh loop (fresh detectors) reopening ``session_id`` from
    ``store``; each run's status and detections (signal, action, repetitions), and the
    session's ``state_errors``. ``converge``: the model repeats its answer (the
    convergence detector's case) instead of looping on a tool."""
    recorder = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient(same_answer if converge else step),
        model="m",
        tools=[lookup],
        detectors=[RepetitionDetector(), ConvergenceDetector()],
        observers=[recorder],
    )
    out: list[Verdict] = []
    async with AgentSession(loop, store=store, session_id=session_id) as session:
        for text in texts:
            result = await (await session.send(text))
            found = tuple(
                (d.signal, d.action, d.repetitions)
                for d in recorder.of("on_loop_detected", result.run_id)
            ) + tuple(
                (d.signal, d.action, d.consecutive)
                for d in recorder.of("on_convergence_detected", result.run_id)
            )
            out.append((str(result.status), found))
        errors = session.state_errors
    return out, errors


def messages(*, converge: bool = False) -> list[str]:
    if converge:
        return ["any news on order 17?"] * SENDS
    return [f"any news on order 17? ({i})" for i in range(SENDS)]
