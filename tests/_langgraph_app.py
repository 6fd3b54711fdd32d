"""A LangGraph ReAct graph driven by LangChain's own fake chat model, for the adapter tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def ai(
    text: str = "",
    calls: Sequence[tuple[str, dict[str, Any], str]] = (),
    usage: tuple[int, int] = (0, 0),
) -> AIMessage:
    """A scripted model answer: text, tool calls ``(name, args, id)``, and the usage reported."""
    return AIMessage(
        content=text,
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls],
        usage_metadata={
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
        response_metadata={
            "finish_reason": "tool_calls" if calls else "stop",
            "model_name": "fake-model",
        },
    )


def fake_model(answers: Iterable[AIMessage | str]) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(list(answers)))


def react_graph(
    model: Any, tools: Sequence[BaseTool | Any], *, handle_tool_errors: bool | None = None
) -> Any:
    """The ReAct graph: ``agent`` (the model) ⇄ ``tools`` (a ToolNode) until no tool call."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    node = (
        ToolNode(list(tools))
        if handle_tool_errors is None
        else ToolNode(list(tools), handle_tool_errors=handle_tool_errors)
    )
    graph = StateGraph(MessagesState)
    graph.add_node("agent", RunnableLambda(agent, afunc=aagent))
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile()
