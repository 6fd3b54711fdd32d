"""Model backends: a scripted offline model, OpenAI-compatible and Anthropic clients over httpx."""
