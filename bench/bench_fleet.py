"""What a shared budget adds to a model call: a reservation and a commit on local Redis.

Run: ``.venv/bin/python bench/bench_fleet.py`` (``--quick`` for a smoke run). Starts its
own ``redis-server`` on 127.0.0.1 (Debian's package; ``make backends`` installs it) and
skips with the reason when there is none.

Rows, per model call (one ``reserve`` before it and one ``commit`` after), with the
ratio to a bare ``PING`` round trip on the same client measured in the same process:

- ``RedisLedger`` with one scope (the session) and with three (session, tenant, user);
- the in-process ledger (the default when no shared store is configured);
- a ``PING`` round trip, the floor of any Redis call.

The target is at most 1 ms per model call on local Redis: a model call takes hundreds.

``--load N`` also runs the fleet scenario N times (default 20 in a full run, 2 with
``--quick``): 8 worker processes × 50 ``AgentLoop`` runs (2 in flight per worker) share one
tenant's ``Budget(usd=3)``, every call priced at $0.01 a token, costing $0.02 against a
worst case of about $0.42; it prints the committed spend against the limit for each
repetition (the end-to-end tests run the same with all 50 runs of a worker at once).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import Timing, fmt_ns, fmt_ratio, print_table
from loopobs import Budget
from loopobs.cost.shared import Amounts, InProcessLedger, Reservation, ScopeLimit, SharedBudget


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _time(name: str, op: Callable[[], Awaitable[object]], calls: int, repeats: int) -> Timing:
    for _ in range(min(calls, 50)):
        await op()
    per_op = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            await op()
        per_op.append((time.perf_counter() - started) / calls * 1e9)
    return Timing(name, min(per_op), statistics.median(per_op), calls)


async def _measure(port: int, calls: int, repeats: int) -> list[Timing]:
    import redis.asyncio as redis_asyncio

    from loopobs.redis import RedisLedger

    client = redis_asyncio.Redis(host="127.0.0.1", port=port)
    rows = [await _time("PING round trip (baseline)", client.ping, calls, repeats)]
    budget = Budget(usd=1e9, model_calls=10**12)
    for label, ledger in (
        ("RedisLedger", RedisLedger(client)),
        ("in-process ledger (default)", InProcessLedger()),
    ):
        shared = SharedBudget(ledger, session=budget, scopes={"tenant": budget, "user": budget})
        for scopes in (
            shared.scopes_for("s1"),
            shared.scopes_for("s1", {"tenant": "acme", "user": "u1"}),
        ):

            async def call(
                scopes: list[ScopeLimit] = scopes, shared: SharedBudget = shared
            ) -> None:
                held = await shared.reserve(
                    scopes, Amounts(usd=0.01, input_tokens=1200, output_tokens=512, model_calls=1)
                )
                assert isinstance(held, Reservation)
                await shared.commit(
                    held, Amounts(usd=0.004, input_tokens=1100, output_tokens=90, model_calls=1)
                )

            rows.append(
                await _time(
                    f"{label}, {len(scopes)} scope(s): reserve + commit", call, calls, repeats
                )
            )
    await client.aclose()
    return rows


def _load_worker(port: int, tenant: str, runs: int, out: Any) -> None:
    async def main() -> int:
        import redis.asyncio as redis_asyncio

        from loopobs import AgentLoop, Conversation, ModelRates, RunStatus, Usage
        from loopobs.llm import Reply, ScriptedClient
        from loopobs.redis import RedisLedger

        client = redis_asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        shared = SharedBudget(
            RedisLedger(client, timeout_s=5.0), scopes={"tenant": Budget(usd=LOAD_LIMIT_USD)}
        )
        prices = {"m": ModelRates(input_per_mtok=10_000.0, output_per_mtok=10_000.0)}

        gate = asyncio.Semaphore(IN_FLIGHT_PER_WORKER)

        async def one() -> bool:
            async with gate:
                return await run_once()

        async def run_once() -> bool:
            reply = Reply(text="ok", usage=Usage(input_tokens=1, output_tokens=1))
            loop = AgentLoop(
                ScriptedClient([reply]),
                model="m",
                detectors=[],
                prices=prices,
                shared_budget=shared,
                request_options={"max_tokens": 40},
            )
            result = await loop.run("q", session=Conversation(attribution={"tenant": tenant}))
            return result.status is RunStatus.COMPLETED

        made = sum(await asyncio.gather(*(one() for _ in range(runs))))
        await client.aclose()
        return made

    out.put(asyncio.run(main()))


LOAD_LIMIT_USD = 3.0
IN_FLIGHT_PER_WORKER = 2
"""Runs a worker has in flight at once: 8 workers × 2 worst cases (about $0.42 each) are more
than the limit holds, so reservations contend, and the budget runs out while runs remain."""


def _load(port: int, repetitions: int) -> list[tuple[int, float, int]]:
    import multiprocessing

    import redis

    ctx = multiprocessing.get_context("spawn")
    rows = []
    for repetition in range(repetitions):
        out = ctx.Queue()
        tenant = f"load-{repetition}"
        workers = [ctx.Process(target=_load_worker, args=(port, tenant, 50, out)) for _ in range(8)]
        for w in workers:
            w.start()
        made = sum(out.get(timeout=300) for _ in workers)
        for w in workers:
            w.join(30)
        client = redis.Redis(host="127.0.0.1", port=port)
        usd = float(client.hget(f"loopobs:budget:tenant:{tenant}:committed", "usd") or 0.0)
        client.close()
        rows.append((repetition + 1, usd, made))
    return rows


def main(argv: list[str] | None = None) -> list[Timing]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--load",
        type=int,
        default=None,
        metavar="N",
        help="repetitions of the 8-worker load scenario (default 20, 2 quick)",
    )
    args = parser.parse_args(argv)
    repetitions = args.load if args.load is not None else (2 if args.quick else 20)
    binary = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        binary = None
    if binary is None:
        print(
            "skipped: redis-server or the redis package is missing (run `make backends`; "
            "pip install loopobs[redis])"
        )
        return []
    port = _free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            calls, repeats = (200, 3) if args.quick else (2000, 7)
            rows = asyncio.run(_measure(port, calls, repeats))
            load = _load(port, repetitions) if repetitions > 0 else []
        finally:
            server.kill()
            server.wait(10)
    base = rows[0].median_ns
    print_table(
        ["per model call", "best", "median", "vs PING"],
        [
            [r.name, fmt_ns(r.best_ns), fmt_ns(r.median_ns), fmt_ratio(r.median_ns, base)]
            for r in rows
        ],
    )
    if load:
        print(
            f"\n8 workers × 50 runs ({IN_FLIGHT_PER_WORKER} in flight each), one tenant "
            f"Budget(usd={LOAD_LIMIT_USD:g}):\n"
        )
        print_table(
            ["repetition", "committed USD", "limit", "runs completed of 400"],
            [[str(n), f"{usd:.2f}", f"{LOAD_LIMIT_USD:.2f}", str(made)] for n, usd, made in load],
        )
        worst = max(usd for _, usd, _ in load)
        print(
            f"\nhighest committed spend over {len(load)} repetitions: ${worst:.2f} "
            f"of ${LOAD_LIMIT_USD:.2f}"
        )
    return rows


if __name__ == "__main__":
    main()
