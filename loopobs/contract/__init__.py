"""The contract: what every other layer of loopobs agrees on.

Event contexts and hook names (:mod:`.events`), the observer base class and its
fan-out (:mod:`.observer`), the error tree (:mod:`.errors`), the model-client
protocol and messages (:mod:`.model`), tool definitions and outcomes
(:mod:`.tools`), the compactor protocol (:mod:`.compaction`), stable hashing
(:mod:`.hashing`), token-count plausibility (:mod:`.token_counts`) and the run
→ trace table (:mod:`.trace_links`).

This is the bottom layer: it imports nothing else from loopobs. Exporters,
clients, detectors and adapters depend on it and on nothing of the loop.
"""
