"""The SSE decoder on long lines: linear work, against the same bytes in short lines.

Run: ``.venv/bin/python bench/bench_sse.py`` (``--quick`` for 4 MB instead of 40 MB).

One ``data:`` line of N bytes arrives in 16 KiB chunks (a large tool-call argument,
or a server that never ends its line); the baseline is the same number of bytes as
ordinary short events, decoded by the same decoder in the same run. Work linear in
the input keeps the ratio near 1 whatever N is; a decoder that re-joins its pending
line at every chunk (quadratic) grows with N (40 MB took about 8 s that way).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import fmt_ratio, print_table
from loopobs.llm._sse import SSEDecoder

CHUNK = 16 * 1024


def _decode(body: bytes) -> float:
    decoder = SSEDecoder(max_line_chars=len(body) + 1)
    started = time.perf_counter()
    for start in range(0, len(body), CHUNK):
        decoder.feed(body[start : start + CHUNK])
    decoder.flush()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> list[tuple[str, str, str, str]]:
    """Print and return the table rows."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rows: list[tuple[str, str, str, str]] = []
    for megabytes in (1, 4) if args.quick else (4, 40):
        size = megabytes * 1_000_000
        long_line = b"data: " + b"x" * size + b"\n\n"
        short = b'data: {"choices":[{"delta":{"content":"word"}}]}\n\n'
        short_lines = short * (len(long_line) // len(short))
        ours = min(_decode(long_line) for _ in range(3))
        base = min(_decode(short_lines) for _ in range(3))
        rows.append(
            (
                f"one {megabytes} MB line in 16 KiB chunks vs short events",
                f"{ours * 1000:.1f} ms",
                f"{base * 1000:.1f} ms",
                fmt_ratio(ours, base),
            )
        )
    print_table(("cost", "ours", "baseline", "ratio"), rows)
    return rows


if __name__ == "__main__":
    main()
