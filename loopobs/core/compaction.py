"""Deprecated: split into :mod:`loopobs.contract.compaction` (estimates, compactors) and
:mod:`loopobs.loop.compaction` (the loop's compaction step); goes away in loopobs 0.3."""

import warnings

from loopobs._moved import REMOVED_IN
from loopobs.contract.compaction import *  # noqa: F403
from loopobs.contract.compaction import __all__ as _contract_names
from loopobs.loop.compaction import *  # noqa: F403
from loopobs.loop.compaction import __all__ as _loop_names

__all__ = [*_contract_names, *_loop_names]  # noqa: PLE0604

warnings.warn(
    "loopobs.core.compaction moved to loopobs.contract.compaction (estimates, "
    f"compactors) and loopobs.loop.compaction; the old path goes away in loopobs "
    f"{REMOVED_IN}",
    DeprecationWarning,
    stacklevel=2,
)
