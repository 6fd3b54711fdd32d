"""loopobs: observability for LLM agent loops, built on OpenTelemetry.

The public API lives here; submodules are implementation detail unless their
docs say otherwise (``loopobs.llm``, ``loopobs.exporters``, ``loopobs.testing``).
"""

from typing import TYPE_CHECKING, Any

from loopobs.core.detectors import (
    ConvergenceDetector,
    Normaliser,
    RepetitionDetector,
    ToolNormalisation,
)
from loopobs.core.errors import (
    Cancelled,
    ContextExceeded,
    FallbackExhausted,
    InvalidResumeInput,
    InvalidToolInput,
    LoopDetected,
    LoopError,
    MaxTurnsExceeded,
    ModelError,
    NotYetAwake,
    RateLimited,
    ResumeError,
    SessionBusy,
    StreamError,
    ToolError,
    ToolExecutionError,
    ToolNotFound,
    ToolTimeout,
)
from loopobs.core.events import (
    CONTEXT_TYPES,
    HOOKS,
    CompactedContext,
    ConvergenceDetectedContext,
    DisplayHint,
    EventContext,
    FallbackContext,
    HookName,
    LoopDetectedContext,
    ModelSwitchedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    SleepContext,
    StreamContext,
    StreamFailureContext,
    StreamStartContext,
    SuspendedContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    ToolAnnotations,
    ToolCallReceivedContext,
    ToolOutcomeKind,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
    Usage,
)
from loopobs.core.loop import AgentLoop
from loopobs.core.observer import EventSink, LoopObserver, ObserverSet, listened_hooks
from loopobs.core.run import Checkpoint, RunResult, RunStatus, Session
from loopobs.core.tools import Output, Sleep, Suspend, Tool, tool

if TYPE_CHECKING:
    from loopobs.exporters.setup import configure

__version__ = "0.1.0"

__all__ = [
    "AgentLoop",
    "CONTEXT_TYPES",
    "Cancelled",
    "Checkpoint",
    "CompactedContext",
    "ContextExceeded",
    "ConvergenceDetectedContext",
    "ConvergenceDetector",
    "DisplayHint",
    "EventContext",
    "EventSink",
    "FallbackContext",
    "FallbackExhausted",
    "HOOKS",
    "HookName",
    "InvalidResumeInput",
    "InvalidToolInput",
    "LoopDetected",
    "LoopDetectedContext",
    "LoopError",
    "LoopObserver",
    "MaxTurnsExceeded",
    "ModelError",
    "ModelSwitchedContext",
    "Normaliser",
    "NotYetAwake",
    "ObserverSet",
    "Output",
    "RateLimited",
    "RepetitionDetector",
    "ResponseContext",
    "ResumeError",
    "RunEndContext",
    "RunResult",
    "RunStartContext",
    "RunStatus",
    "Session",
    "SessionBusy",
    "Sleep",
    "SleepContext",
    "StreamContext",
    "StreamError",
    "StreamFailureContext",
    "StreamStartContext",
    "Suspend",
    "SuspendedContext",
    "TextDeltaContext",
    "ThinkingDeltaContext",
    "Tool",
    "ToolAnnotations",
    "ToolCallReceivedContext",
    "ToolError",
    "ToolExecutionError",
    "ToolNormalisation",
    "ToolNotFound",
    "ToolOutcomeKind",
    "ToolPostContext",
    "ToolPreContext",
    "ToolTimeout",
    "TurnEndContext",
    "TurnStartContext",
    "Usage",
    "__version__",
    "configure",
    "listened_hooks",
    "tool",
]


def __getattr__(name: str) -> Any:
    # configure() lives with the exporters; importing it lazily keeps `import loopobs` light.
    if name == "configure":
        from loopobs.exporters.setup import configure

        globals()["configure"] = configure
        return configure
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
