"""Tool sources: tools that come from outside the loop (MCP servers) and may change.

A :class:`ToolSource` is what ``AgentLoop`` is given (a description, not yet
connected); :meth:`ToolSource.connect` returns a :class:`ConnectedSource`
whose :meth:`~ConnectedSource.tools` may change while it is open (a server's
list-changed notification), which it signals by bumping ``version``.
:class:`LiveTools` is the mapping a run reads its tools from: the loop's own
tools and every open source's, merged again whenever a source's version
changes, so the next model call sees the new list.

Name clashes: a source's tool may not take a name already taken (by a loop
tool or an earlier source). At connect :func:`merge` raises
:class:`~loopobs.contract.errors.ToolNameClash`; a clash that appears later (a
refreshed list) leaves the newcomer out and logs it once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from loopobs.contract.errors import ToolNameClash
from loopobs.contract.observer import ObserverSet
from loopobs.contract.tools import Tool

__all__ = ["ConnectedSource", "LiveTools", "ToolSource", "merge"]

logger = logging.getLogger("loopobs.tools")


@runtime_checkable
class ConnectedSource(Protocol):
    """An open source of tools."""

    @property
    def version(self) -> int:
        """Bumped whenever :meth:`tools` changes."""

    def tools(self) -> Mapping[str, Tool]:
        """The source's tools now, by the name the model sees."""

    async def aclose(self) -> None:
        """Close the source (stop its server processes); idempotent, never raises."""


@runtime_checkable
class ToolSource(Protocol):
    """A description of a tool source; connecting it gives a :class:`ConnectedSource`."""

    async def connect(self, observers: ObserverSet) -> ConnectedSource:
        """Connect (start processes, handshake, list tools); raise if that fails."""


def merge(
    own: Mapping[str, Tool], sources: Sequence[ConnectedSource], *, strict: bool
) -> dict[str, Tool]:
    """The loop's tools and the sources', in that order.

    Raises:
        ToolNameClash: ``strict`` and a name is taken twice (else the later one is left out).
    """
    merged = dict(own)
    for source in sources:
        for name, found in source.tools().items():
            if name in merged:
                clash = ToolNameClash(tool=name)
                if strict:
                    raise clash
                logger.warning("%s; the later tool is left out", clash)
                continue
            merged[name] = found
    return merged


class LiveTools(Mapping[str, Tool]):
    """A run's tools: its loop's own plus its open sources', re-merged when a source changes."""

    __slots__ = ("_merged", "_own", "_sources", "_versions")

    def __init__(self, own: Mapping[str, Tool], sources: Sequence[ConnectedSource]) -> None:
        self._own = dict(own)
        self._sources = tuple(sources)
        self._versions = tuple(s.version for s in self._sources)
        self._merged = merge(self._own, self._sources, strict=True)

    def _current(self) -> dict[str, Tool]:
        if self._sources:
            versions = tuple(s.version for s in self._sources)
            if versions != self._versions:
                self._versions = versions
                self._merged = merge(self._own, self._sources, strict=False)
        return self._merged

    def __getitem__(self, name: str) -> Tool:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())
