"""Deprecated: moved to :mod:`loopobs.detectors`.

This path goes away in loopobs 0.3. Unlike the module shims, this package stays a
package of its own, so that its submodules (``loopobs.core.detectors.repetition`` …)
resolve to their shims rather than to second copies of the new modules.
"""

import warnings

from loopobs._moved import REMOVED_IN
from loopobs.detectors import *  # noqa: F403
from loopobs.detectors import __all__ as __all__

warnings.warn(
    "loopobs.core.detectors moved to loopobs.detectors; the old path goes away in "
    f"loopobs {REMOVED_IN}",
    DeprecationWarning,
    stacklevel=2,
)
