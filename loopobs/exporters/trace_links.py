"""The run → trace table now lives in :mod:`loopobs.core.trace_links`; this name re-exports it."""

from loopobs.core import trace_links as _moved
from loopobs.core.trace_links import *  # noqa: F403

__all__ = list(_moved.__all__)
