"""Model backends: a scripted offline model, OpenAI-compatible and Anthropic clients over httpx."""

from loopobs.llm.anthropic import AnthropicClient
from loopobs.llm.openai import OpenAIClient
from loopobs.llm.scripted import Fail, Reply, ScriptedClient, Step, ToolCall

__all__ = ["AnthropicClient", "Fail", "OpenAIClient", "Reply", "ScriptedClient", "Step", "ToolCall"]
