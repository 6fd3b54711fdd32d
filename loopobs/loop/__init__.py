"""``AgentLoop`` and its phases.

:mod:`.loop` is the public face; a run is driven by :mod:`.driver` through the model
call (:mod:`.model_call`), the tool phase (:mod:`.tool_phase`), the compaction step
(:mod:`.compaction`), the verdict policy (:mod:`.policy`) and parking
(:mod:`.parking`, :mod:`.checkpoint`). :mod:`.runtime` holds what a run is handed,
:mod:`.run` the conversation and the result, :mod:`.workers` the threads of sync
tools, :mod:`.context_providers` and :mod:`.tool_sources` the inputs from outside.

Imports the contract, cost and the detectors; never the exporters or the clients.
"""
