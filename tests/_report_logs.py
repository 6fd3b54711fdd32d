"""Event logs for the HTML report's tests and bench: a synthetic log of any size."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

from loopobs.contract.errors import LoopDetected, ToolExecutionError
from loopobs.contract.events import (
    EventContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    StreamStartContext,
    StreamSuccessContext,
    TextDeltaContext,
    ToolCallReceivedContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.exporters.jsonl import encode_event

EVENTS_PER_RUN = 21


def synthetic_run(rng: random.Random, start_ns: int) -> list[EventContext]:
    """One two-turn run with two parallel tool calls: exactly :data:`EVENTS_PER_RUN` events."""
    run_id = uuid.UUID(int=rng.getrandbits(128), version=4)
    t = start_ns
    events: list[EventContext] = []

    def step(ms: float) -> int:
        nonlocal t
        t += int(ms * 1e6)
        return t

    status = rng.choices(["completed", "failed", "loop_detected"], weights=[8, 1, 1])[0]
    events.append(
        RunStartContext(
            run_id=run_id,
            time_ns=t,
            session_id=run_id,
            agent=rng.choice(["planner", "coder"]),
            model="m-large",
        )
    )
    in_tok, out_tok = 0, 0
    for turn in range(2):
        events.append(TurnStartContext(run_id=run_id, time_ns=step(0.1), turn=turn, query="q" * 20))
        events.append(
            StreamStartContext(
                run_id=run_id, time_ns=step(0.1), turn=turn, model="m-large", provider="openai"
            )
        )
        deltas = 3 if turn == 0 else 0
        for _ in range(deltas):
            events.append(
                TextDeltaContext(
                    run_id=run_id, time_ns=step(rng.uniform(5, 30)), turn=turn, delta="word "
                )
            )
        i, o = rng.randint(100, 4000), rng.randint(5, 300)
        in_tok, out_tok = in_tok + i, out_tok + o
        events.append(
            StreamSuccessContext(
                run_id=run_id,
                time_ns=step(rng.uniform(5, 80)),
                turn=turn,
                model="m-large",
                provider="openai",
                input_tokens=i,
                output_tokens=o,
                time_to_first_token_ms=rng.uniform(2, 20),
            )
        )
        events.append(
            ResponseContext(
                run_id=run_id,
                time_ns=step(0.05),
                turn=turn,
                text="answer",
                tool_calls=2 if turn == 0 else 0,
            )
        )
        if turn == 0:
            for n in range(2):
                events.append(
                    ToolCallReceivedContext(
                        run_id=run_id,
                        time_ns=step(0.01),
                        turn=turn,
                        tool="search",
                        tool_call_id=f"c{n}",
                        input={"query": f"topic {n}"},
                    )
                )
            for n in range(2):
                events.append(
                    ToolPreContext(
                        run_id=run_id,
                        time_ns=step(0.01),
                        turn=turn,
                        tool="search",
                        tool_call_id=f"c{n}",
                    )
                )
            for n in range(2):
                failed = status == "failed" and n == 1
                events.append(
                    ToolPostContext(
                        run_id=run_id,
                        time_ns=step(rng.uniform(1, 40)),
                        turn=turn,
                        tool="search",
                        tool_call_id=f"c{n}",
                        is_error=failed,
                        outcome="error" if failed else "output",
                        error=ToolExecutionError("backend down", tool="search") if failed else None,
                    )
                )
        events.append(
            TurnEndContext(
                run_id=run_id,
                time_ns=step(0.05),
                turn=turn,
                success=True,
                input_tokens=i,
                output_tokens=o,
            )
        )
    error = LoopDetected("stopped: search repeated 10 times") if status == "loop_detected" else None
    events.append(
        RunEndContext(
            run_id=run_id,
            time_ns=step(0.1),
            success=status == "completed",
            error=error,
            total_turns=2,
            status=RunStatus(status),
            duration_ms=(t - start_ns) / 1e6,
            input_tokens=in_tok,
            output_tokens=out_tok,
        )
    )
    return events


def write_synthetic_log(path: Path, runs: int, *, seed: int = 0) -> int:
    """Write ``runs`` synthetic runs (one after another) to ``path``; returns the event count."""
    rng = random.Random(seed)
    start = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z, fixed so the log is reproducible
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for n in range(runs):
            events = synthetic_run(rng, start + n * 250_000_000)
            fh.write("\n".join(encode_event(e) for e in events) + "\n")
            count += len(events)
    return count
