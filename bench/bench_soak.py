"""Soak: one session of 100,000 turns with every observer; RSS at start, middle and end.

Run: ``.venv/bin/python bench/bench_soak.py`` (``--quick``: 10,000 turns).

The session runs 50-turn runs back to back (one model call and one tool call a turn)
with every observer and the default detectors, a bounded conversation
(``context_window`` + the default TruncatingCompactor; the scripted model reports the
request's estimated size as its input tokens), spans through a BatchSpanProcessor
into an exporter that counts and discards, and the event log to a temporary file.
Reported: resident set size after the first run, at the middle and at the end, and
the per-run state left in every observer (all 0). The in-test version is
``tests/test_reliability_soak.py`` (5,000 turns).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import print_table
from bench.bench_stack import all_observers, lookup
from loopobs import AgentLoop, Conversation, Usage
from loopobs.contract.compaction import estimate_tokens
from loopobs.contract.model import ModelRequest, ToolResultMessage
from loopobs.exporters import MetricsObserver, PrometheusObserver, TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall

TURNS_PER_RUN = 50
WINDOW = 4_000


def rss_mib() -> float:
    """Current resident set size in MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def script() -> Any:
    counter = iter(range(1 << 62))
    pad = " filler" * 30

    def step(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        done = int(last.content.split()[1]) if isinstance(last, ToolResultMessage) else 0
        usage = Usage(input_tokens=estimate_tokens(request.messages), output_tokens=10)
        if done < TURNS_PER_RUN - 1:
            return Reply(
                text=f"working{pad}",
                usage=usage,
                tool_calls=(
                    ToolCall(
                        "lookup", {"step": done + 1, "total": TURNS_PER_RUN, "n": next(counter)}
                    ),
                ),
            )
        return Reply(text=f"answer number {next(counter)}{pad}", usage=usage)

    return step


async def soak(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        stack = all_observers(directory)
        client = ScriptedClient(script(), chunk_size=64)
        loop = AgentLoop(
            client,
            model="m1",
            tools=[lookup],
            observers=stack.observers,
            context_window=WINDOW,
            max_turns=TURNS_PER_RUN + 5,
        )
        session = Conversation()
        runs = turns // TURNS_PER_RUN
        marks: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(runs):
            result = await loop.run("keep going", session=session)
            assert result.ok, result.error
            client.requests.clear()  # the test double's own request log
            if i in (0, runs // 2 - 1, runs - 1):
                gc.collect()
                marks[{0: "start", runs // 2 - 1: "middle"}.get(i, "end")] = rss_mib()
        elapsed = time.perf_counter() - start
        obs = stack.observers
        tracing, metrics, prom = obs[0], obs[1], obs[2]
        assert isinstance(tracing, TracingObserver)
        assert isinstance(metrics, MetricsObserver)
        assert isinstance(prom, PrometheusObserver)
        left = {
            "tracing open runs": tracing.open_runs,
            "open spans": tracing.open_spans(),
            "metrics open runs": metrics.open_runs,
            "prometheus open runs": prom.open_runs,
            "policy verdicts": loop._policy.open_runs,
            "detector run maps": sum(len(getattr(d, "_run_sessions", ())) for d in loop.detectors),
        }
        stack.close()
    return {
        "turns": session.turn,
        "messages": len(session.messages),
        "seconds": elapsed,
        "rss": marks,
        "left": left,
        "spans": stack.exporter.spans,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the soak, print the table, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 turns")
    args = parser.parse_args(argv)
    out = asyncio.run(soak(10_000 if args.quick else 100_000))
    rss = out["rss"]
    rows = [
        {
            "name": f"one session, {out['turns']:,} turns, all observers",
            "rss_start_mib": rss["start"],
            "rss_middle_mib": rss["middle"],
            "rss_end_mib": rss["end"],
            "seconds": out["seconds"],
            "messages_at_end": out["messages"],
            "left": out["left"],
            "spans": out["spans"],
        }
    ]
    print(
        f"Soak — Python {sys.version.split()[0]}; {out['seconds']:.0f} s, "
        f"{out['spans']:,} spans exported, {out['messages']} messages in the session at the end"
    )
    print_table(
        ["case", "RSS start", "RSS middle", "RSS end", "per-run state left"],
        [
            [
                rows[0]["name"],
                f"{rss['start']:.1f} MiB",
                f"{rss['middle']:.1f} MiB",
                f"{rss['end']:.1f} MiB",
                ", ".join(f"{k} {v}" for k, v in out["left"].items()),
            ]
        ],
    )
    return rows


if __name__ == "__main__":
    main()
