"""Request building over a long conversation: cached message encodings vs a full encode.

Run: ``.venv/bin/python bench/bench_request.py`` (``--quick``: 300 turns).

A 1,000-turn conversation (each turn an assistant message with a tool call and its
result, ~200 B each) is built turn by turn, as the loop sends it: ``build_content``
(each message encoded once, the rest joined) against ``json_body(build_body(...))``
(the whole history encoded every turn, as before), for both HTTP clients. The last
column compares the last 10 turns with the first 10: work linear in what changed
keeps it near 1 (the byte join is the only part that grows).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import fmt_ratio, print_table
from loopobs.contract.model import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from loopobs.llm import AnthropicClient, OpenAIClient
from loopobs.llm._http import json_body


def _requests(turns: int) -> list[ModelRequest]:
    history: list[Message] = [
        SystemMessage(content="You are terse."),
        UserMessage(content="Look things up until done."),
    ]
    out = []
    for turn in range(turns):
        out.append(ModelRequest(model="gpt-4o-mini", messages=tuple(history)))
        history.append(
            AssistantMessage(
                content=f"step {turn}: looking it up",
                tool_calls=(
                    ToolCallPart(
                        id=f"call_{turn:06d}",
                        name="lookup",
                        arguments={"step": turn, "query": "weather in Paris"},
                    ),
                ),
            )
        )
        history.append(
            ToolResultMessage(
                tool_call_id=f"call_{turn:06d}",
                name="lookup",
                content=f"step {turn}: 12 °C, light rain, wind 20 km/h",
            )
        )
    return out


def _per_turn(build: object, requests: list[ModelRequest]) -> list[float]:
    times = []
    for request in requests:
        started = time.perf_counter()
        build(request)  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> list[list[str]]:
    """Print and return the table rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    requests = _requests(300 if args.quick else 1_000)
    rows = []
    clients: list[Any] = [OpenAIClient, AnthropicClient]
    for make in clients:
        full_client, cached_client = make(api_key="k"), make(api_key="k")
        full = _per_turn(lambda r, c=full_client: json_body(c.build_body(r)), requests)
        cached = _per_turn(cached_client.build_content, requests)
        for name, times in (("whole history each turn", full), ("cached messages", cached)):
            rows.append(
                [
                    f"{make.__name__}: {name}",
                    f"{sum(times) * 1e3:.1f} ms",
                    f"{sum(times) / len(times) * 1e6:.1f} µs",
                    fmt_ratio(sum(times[-10:]), sum(times[:10])),
                ]
            )
        rows.append(
            [f"{make.__name__}: cached vs whole", "", "", fmt_ratio(sum(cached), sum(full))]
        )
    print(f"{len(requests)} requests of a growing conversation")
    print_table(["request building", "total", "per turn", "last 10 / first 10 turns"], rows)
    return rows


if __name__ == "__main__":
    main()
