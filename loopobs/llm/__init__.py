"""Model backends: a scripted offline model, OpenAI-compatible and Anthropic clients over httpx."""

from loopobs.llm.scripted import Fail, Reply, ScriptedClient, Step, ToolCall

__all__ = ["Fail", "Reply", "ScriptedClient", "Step", "ToolCall"]
