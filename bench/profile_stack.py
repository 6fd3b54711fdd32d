"""Profile one 1,000-turn run with every observer and the default detectors (cProfile).

Run: ``.venv/bin/python bench/profile_stack.py [--turns N] [--top K] [--sort tottime]``.
Prints the top functions by own time, the figures named in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_stack import all_observers, lookup, script
from loopobs import AgentLoop
from loopobs.llm import ScriptedClient


async def _run(turns: int, directory: str) -> None:
    stack = all_observers(directory)
    loop = AgentLoop(
        ScriptedClient(script(turns - 1), chunk_size=64),
        model="m1",
        tools=[lookup],
        max_turns=turns + 1,
        observers=stack.observers,
    )
    result = await loop.run("go")
    assert result.ok, result.error
    stack.close()


def main(argv: list[str] | None = None) -> None:
    """Profile the run and print the top functions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="loopobs-profile-") as directory:
        asyncio.run(_run(50, directory))
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(_run(args.turns, directory))
        profiler.disable()
    pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
