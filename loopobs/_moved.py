"""Old import paths that still work for one release, with a ``DeprecationWarning``.

``loopobs.core`` was split into layer folders (``contract``, ``cost``, ``loop``,
``sessions``, ``detectors``). Each old module is now a small file that replaces
itself in ``sys.modules`` with the module it moved to, so ``from loopobs.core.events
import X`` and ``loopobs.core.events.X`` give the very objects of the new path
(monkeypatching either patches both).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import FrameType, ModuleType

__all__ = ["MOVED", "alias"]

REMOVED_IN = "0.3"

MOVED: dict[str, str] = {
    "loopobs.core.events": "loopobs.contract.events",
    "loopobs.core.errors": "loopobs.contract.errors",
    "loopobs.core.observer": "loopobs.contract.observer",
    "loopobs.core.model": "loopobs.contract.model",
    "loopobs.core.token_counts": "loopobs.contract.token_counts",
    "loopobs.core.trace_links": "loopobs.contract.trace_links",
    "loopobs.core.hashing": "loopobs.contract.hashing",
    "loopobs.core.isotime": "loopobs.contract.isotime",
    "loopobs.core.tools": "loopobs.contract.tools",
    "loopobs.core.pricing": "loopobs.cost.pricing",
    "loopobs.core.budget": "loopobs.cost.budget",
    "loopobs.core.spending": "loopobs.cost.spending",
    "loopobs.core.loop": "loopobs.loop.loop",
    "loopobs.core.driver": "loopobs.loop.driver",
    "loopobs.core.model_call": "loopobs.loop.model_call",
    "loopobs.core.tool_phase": "loopobs.loop.tool_phase",
    "loopobs.core.policy": "loopobs.loop.policy",
    "loopobs.core.parking": "loopobs.loop.parking",
    "loopobs.core.checkpoint": "loopobs.loop.checkpoint",
    "loopobs.core.workers": "loopobs.loop.workers",
    "loopobs.core.context_providers": "loopobs.loop.context_providers",
    "loopobs.core.tool_sources": "loopobs.loop.tool_sources",
    "loopobs.core.run": "loopobs.loop.run",
    "loopobs.core.runtime": "loopobs.loop.runtime",
    "loopobs.core.session": "loopobs.sessions.session",
    "loopobs.core.session_store": "loopobs.sessions.stores",
    "loopobs.core.detectors.convergence": "loopobs.detectors.convergence",
    "loopobs.core.detectors.normalise": "loopobs.detectors.normalise",
    "loopobs.core.detectors.repetition": "loopobs.detectors.repetition",
    "loopobs.exporters.trace_links": "loopobs.contract.trace_links",
}
"""Old module path → where it lives now (the CHANGELOG lists the same).

``loopobs.core.compaction`` is not here: it was split in two, and its shim imports both.
"""


def _caller_stacklevel() -> int:
    # Point the warning at the user's import statement: skip this module and the shim.
    # ``warnings`` itself skips the import machinery's frames when it counts levels.
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if not name.startswith("<frozen importlib"):
            if not (
                name == __file__.replace("\\", "/")
                or "/loopobs/core/" in name
                or name.endswith("/exporters/trace_links.py")
            ):
                return level
            level += 1
        frame = frame.f_back
    return 2


def alias(old: str) -> ModuleType:
    """Warn that ``old`` moved, import its new module, and make ``old`` name it."""
    new = MOVED[old]
    warnings.warn(
        f"{old} moved to {new}; the old path goes away in loopobs {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=_caller_stacklevel(),
    )
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
