"""``ast.parse`` for the tests that read the source, safe from a CPython 3.11.7 bug."""

from __future__ import annotations

import ast
import gc
from types import CodeType


def parse(source: str) -> ast.Module:
    """The module ``source`` parses to.

    CPython 3.11.7's ``ast.parse`` fails with "AST constructor recursion depth mismatch"
    when the garbage collector runs finalizers while it builds the tree (after a test that
    left garbage behind), so the collector waits until the tree is built.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


def compile_source(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, with the collector held off as in :func:`parse`
    (compiling builds the same tree, and fails the same way)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return compile(source, filename, "exec")
    finally:
        if enabled:
            gc.enable()
