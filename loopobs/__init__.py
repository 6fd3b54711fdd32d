"""loopobs: observability for LLM agent loops, built on OpenTelemetry.

The public API lives here: every type that appears in a public signature (the
loop, its model client protocol and messages, tools, compactors, observers,
the event contexts, errors) is importable from ``loopobs``. Submodules are
implementation detail unless their docs say otherwise (``loopobs.llm``,
``loopobs.exporters``, ``loopobs.testing``).
"""

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from loopobs.contract.compaction import Compactor, TruncatingCompactor, estimate_tokens
from loopobs.cost.budget import Budget, BudgetTracker, Spend
from loopobs.cost.shared import (
    Amounts,
    BudgetLedger,
    InProcessLedger,
    Refusal,
    Reservation,
    ScopeLimit,
    SharedBudget,
)
from loopobs.cost.spending import BudgetGuard

# Tool sources (MCP), context providers and long-lived sessions.
from loopobs.loop.context_providers import ContextProvider, ProviderSpec

if TYPE_CHECKING:  # loaded on first use: see _LAZY
    from loopobs.detectors import (
        ConvergenceDetector,
        Normaliser,
        RepetitionDetector,
        ToolNormalisation,
    )
from loopobs.contract.errors import (
    BudgetExceeded,
    BudgetUnavailable,
    Cancelled,
    CheckpointAlreadyResumed,
    ContextExceeded,
    FallbackExhausted,
    Interrupted,
    InvalidResumeInput,
    InvalidToolInput,
    LoopDetected,
    LoopError,
    MaxTurnsExceeded,
    McpError,
    ModelError,
    NotYetAwake,
    ProviderFailed,
    QueueFull,
    RateLimited,
    ResumeError,
    SessionBusy,
    SessionClosed,
    StoreUnavailable,
    StreamError,
    ToolError,
    ToolExecutionError,
    ToolNameClash,
    ToolNotFound,
    ToolTimeout,
    ToolWorkersExhausted,
)
from loopobs.contract.events import (
    CONTEXT_TYPES,
    HOOKS,
    RENAMED_CONTEXTS,
    SESSION_HOOKS,
    BackpressureContext,
    BudgetExceededContext,
    BudgetLimit,
    BudgetUnpricedContext,
    CompactionContext,
    ContextProviderContext,
    ConvergenceAction,
    ConvergenceDetectedContext,
    DisplayHint,
    DisplayKind,
    EventContext,
    FallbackContext,
    HookName,
    LoopAction,
    LoopDetectedContext,
    McpCallInfo,
    ModelSwitchedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    SessionResetContext,
    SharedBudgetContext,
    SharedBudgetOperation,
    SharedBudgetOutcome,
    SleepContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
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
    UsageDetail,
)
from loopobs.contract.model import (
    AssistantMessage,
    Finish,
    LlmClient,
    Message,
    ModelRequest,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ThinkingBlock,
    ThinkingBlockReady,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    ToolDefinition,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from loopobs.contract.observer import EventSink, LoopObserver, ObserverSet, listened_hooks
from loopobs.cost.pricing import GenAIPrices, ModelRates, PriceLookup, price_lookup
from loopobs.loop.loop import AgentLoop, ClaimHook

if TYPE_CHECKING:  # loaded on first use: see _LAZY
    from loopobs.loop.run import Checkpoint, ParkedCall
from loopobs.contract.tools import (
    Output,
    Sleep,
    Suspend,
    Tool,
    ToolCallScope,
    ToolReturn,
    current_tool_call,
    tool,
)
from loopobs.loop.run import Conversation, RunResult
from loopobs.loop.tool_sources import ConnectedSource, ToolSource
from loopobs.sessions.session import AgentSession, QueuePolicy, SessionUpdate
from loopobs.sessions.stores import (
    FileStore,
    MemoryStore,
    SessionStore,
    StoreCorrupt,
    StoreFailed,
)

if TYPE_CHECKING:
    from loopobs.exporters.evaluation import record_evaluation
    from loopobs.exporters.setup import configure

from loopobs._version import __version__

__all__ = [
    "AgentLoop",
    "AgentSession",
    "Amounts",
    "AssistantMessage",
    "BackpressureContext",
    "Budget",
    "BudgetExceeded",
    "BudgetExceededContext",
    "BudgetGuard",
    "BudgetLedger",
    "BudgetLimit",
    "BudgetTracker",
    "BudgetUnavailable",
    "BudgetUnpricedContext",
    "CONTEXT_TYPES",
    "Cancelled",
    "Checkpoint",
    "CheckpointAlreadyResumed",
    "ClaimHook",
    "CompactionContext",
    "Compactor",
    "ConnectedSource",
    "ContextExceeded",
    "ContextProvider",
    "ContextProviderContext",
    "ConvergenceAction",
    "ConvergenceDetectedContext",
    "ConvergenceDetector",
    "Conversation",
    "DisplayHint",
    "DisplayKind",
    "EventContext",
    "EventSink",
    "FallbackContext",
    "FallbackExhausted",
    "FileStore",
    "Finish",
    "GenAIPrices",
    "HOOKS",
    "HookName",
    "InProcessLedger",
    "Interrupted",
    "InvalidResumeInput",
    "InvalidToolInput",
    "LlmClient",
    "LoopAction",
    "LoopDetected",
    "LoopDetectedContext",
    "LoopError",
    "LoopObserver",
    "MaxTurnsExceeded",
    "McpCallInfo",
    "McpError",
    "MemoryStore",
    "Message",
    "ModelError",
    "ModelRates",
    "ModelRequest",
    "ModelSwitchedContext",
    "Normaliser",
    "NotYetAwake",
    "ObserverSet",
    "Output",
    "ParkedCall",
    "PriceLookup",
    "ProviderFailed",
    "ProviderSpec",
    "QueueFull",
    "QueuePolicy",
    "RateLimited",
    "Refusal",
    "RepetitionDetector",
    "Reservation",
    "ResponseContext",
    "ResumeError",
    "RunEndContext",
    "RunResult",
    "RunStartContext",
    "RunStatus",
    "SESSION_HOOKS",
    "ScopeLimit",
    "SessionBusy",
    "SessionClosed",
    "SessionResetContext",
    "SessionStore",
    "SessionUpdate",
    "SharedBudget",
    "SharedBudgetContext",
    "SharedBudgetOperation",
    "SharedBudgetOutcome",
    "Sleep",
    "SleepContext",
    "Spend",
    "StoreCorrupt",
    "StoreFailed",
    "StoreUnavailable",
    "StreamError",
    "StreamEvent",
    "StreamFailureContext",
    "StreamStartContext",
    "StreamSuccessContext",
    "Suspend",
    "SuspendedContext",
    "SystemMessage",
    "TextDelta",
    "TextDeltaContext",
    "ThinkingBlock",
    "ThinkingBlockReady",
    "ThinkingDelta",
    "ThinkingDeltaContext",
    "Tool",
    "ToolAnnotations",
    "ToolCallPart",
    "ToolCallReady",
    "ToolCallReceivedContext",
    "ToolCallScope",
    "ToolDefinition",
    "ToolError",
    "ToolExecutionError",
    "ToolNameClash",
    "ToolNormalisation",
    "ToolNotFound",
    "ToolOutcomeKind",
    "ToolPostContext",
    "ToolPreContext",
    "ToolResultMessage",
    "ToolReturn",
    "ToolSource",
    "ToolTimeout",
    "ToolWorkersExhausted",
    "TruncatingCompactor",
    "TurnEndContext",
    "TurnStartContext",
    "Usage",
    "UsageDetail",
    "UsageReport",
    "UserMessage",
    "__version__",
    "configure",
    "current_tool_call",
    "estimate_tokens",
    "listened_hooks",
    "price_lookup",
    "record_evaluation",
    "tool",
]

# Loaded on first use, not by `import loopobs`: the checkpoint classes are pydantic
# models, the detectors (which an AgentLoop loads when it adds its defaults) compile
# their patterns at import, and configure() and record_evaluation() live with the
# exporters and the OpenTelemetry SDK. Each name here is also in __all__ and in a
# TYPE_CHECKING import above (tests/test_public_api.py checks the three agree).
_LAZY = {
    "configure": "loopobs.exporters.setup",
    "record_evaluation": "loopobs.exporters.evaluation",
    "Checkpoint": "loopobs.loop.run",
    "ParkedCall": "loopobs.loop.run",
    "ConvergenceDetector": "loopobs.detectors",
    "Normaliser": "loopobs.detectors",
    "RepetitionDetector": "loopobs.detectors",
    "ToolNormalisation": "loopobs.detectors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name == "Session":
        from loopobs.loop.run import RENAMED_SESSION

        warnings.warn(RENAMED_SESSION, DeprecationWarning, stacklevel=2)
        return Conversation
    new = RENAMED_CONTEXTS.get(name)
    if new is not None:
        # A renamed class still resolves for a while, with a pointer to its new name.
        warnings.warn(f"loopobs: {name} was renamed {new}", DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
