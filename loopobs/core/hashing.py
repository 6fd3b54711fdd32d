"""Deprecated: moved to :mod:`loopobs.contract.hashing` (this path goes away in loopobs 0.3)."""

from typing import TYPE_CHECKING

from loopobs._moved import alias

if TYPE_CHECKING:
    from loopobs.contract.hashing import *  # noqa: F403
else:
    alias(__name__)
