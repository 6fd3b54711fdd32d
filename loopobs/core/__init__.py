"""Deprecated: ``loopobs.core`` was split into layer folders.

The contract is :mod:`loopobs.contract`, the loop :mod:`loopobs.loop`, cost and budgets
:mod:`loopobs.cost`, long-lived sessions :mod:`loopobs.sessions` and the detectors
:mod:`loopobs.detectors`. The old module paths (``loopobs.core.events`` …) still work for
one release and warn (``loopobs._moved.MOVED`` lists them); import from ``loopobs`` or
the new paths.
"""
