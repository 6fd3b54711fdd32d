"""The ``loopobs`` command: ``demo``, ``replay FILE``, ``inspect FILE``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopobs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the scripted showcase agent with every exporter attached")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loopobs`` console script; returns the exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        print("loopobs demo: not built yet")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
