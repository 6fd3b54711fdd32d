"""Deprecated: moved to :mod:`loopobs.contract.model` (this path goes away in loopobs 0.3)."""

from typing import TYPE_CHECKING

from loopobs._moved import alias

if TYPE_CHECKING:
    from loopobs.contract.model import *  # noqa: F403
else:
    alias(__name__)
