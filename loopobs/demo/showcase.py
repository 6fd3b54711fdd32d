"""The showcase agent: a travel-and-expenses assistant with a few realistic tools.

Each scenario is one or more runs of a scripted model, chosen so that the
scenarios together exercise every event of the contract: streamed text and
thinking (and redacted thinking), parallel tool calls, a tool error, an invalid
argument, an unknown tool, a stream failure recovered by fallback, a model
switch, a compaction, a runaway loop stopped by the detector, converged
answers, a suspension resumed with input, a sleep, a research spree
stopped by its budget (with a warning first) and counted against a shared team budget,
and a concierge session: an
``AgentSession`` whose loop takes tools from an MCP server (a child process
written with the ``mcp`` SDK), a context provider, an injected hint, a full
inbox and a reset. Calls are priced as the models they name (``claude-haiku``,
the fallback, has no price: its cost is unknown).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loopobs.contract.errors import RateLimited, StreamError
from loopobs.contract.events import DisplayHint, Usage
from loopobs.contract.model import LlmClient
from loopobs.contract.observer import LoopObserver
from loopobs.contract.tools import Output, Sleep, Suspend, Tool, tool
from loopobs.cost.budget import Budget
from loopobs.cost.shared import SharedBudget
from loopobs.llm.scripted import Fail, Reply, ScriptedClient, Step, ToolCall
from loopobs.loop.loop import AgentLoop
from loopobs.loop.run import Conversation, RunResult

__all__ = ["SCENARIOS", "Scenario", "Showcase", "showcase_tools"]

SYSTEM_PROMPT = (
    "You are a travel and expenses assistant. Use the tools to look things up, "
    "ask for approval before paying, and answer briefly."
)

_PAGES = {
    "https://example.test/lisbon": "Lisbon: trams, tiles and pastries. " * 30,
    "https://example.test/porto": "Porto: port wine cellars along the Douro. " * 30,
    "https://example.test/faro": "Faro: the gateway to the Algarve beaches. " * 30,
}


@tool
def search(query: str, limit: int = 3) -> list[dict[str, str]]:
    """Search the travel index; returns titles and URLs."""
    return [
        {"title": f"{query.title()} guide {i + 1}", "url": f"https://example.test/{query}-{i}"}
        for i in range(limit)
    ]


@tool
async def fetch_page(url: str) -> str:
    """Fetch a page by URL and return its text."""
    await asyncio.sleep(0)
    return _PAGES.get(url, f"(no page at {url})")


@tool
def read_file(path: str) -> Output:
    """Read a file of the expenses workspace."""
    return Output(
        "currency: EUR\nlimit: 2000\napprover: finance@example.test\n",
        display_hint=DisplayHint.code("yaml"),
    )


@tool
def exchange_rate(base: str, quote: str) -> float:
    """The exchange rate from ``base`` to ``quote``."""
    rates = {("EUR", "USD"): 1.08, ("USD", "EUR"): 0.93}
    if (base, quote) not in rates:
        raise KeyError(f"no rate for {base}/{quote}")
    return rates[(base, quote)]


@tool
def request_approval(amount: float, vendor: str) -> Suspend:
    """Ask finance to approve a payment; parks the run until someone answers."""
    return Suspend(
        f"approve a payment of {amount:.2f} EUR to {vendor}",
        {
            "type": "object",
            "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
            "required": ["approved"],
            "additionalProperties": False,
        },
    )


_SETTLING: dict[str, _dt.datetime] = {}


@tool
def wait_for_settlement(payment_id: str) -> Sleep | str:
    """Check whether a payment has settled; parks the run until it should have."""
    now = _dt.datetime.now(_dt.timezone.utc)
    due = _SETTLING.get(payment_id)
    if due is None:
        due = _SETTLING[payment_id] = now + _dt.timedelta(milliseconds=300)
    if now < due:
        return Sleep.until(due)
    del _SETTLING[payment_id]
    return f"payment {payment_id} settled"


def showcase_tools() -> list[Tool]:
    """The showcase agent's tools."""
    return [search, fetch_page, read_file, exchange_rate, request_approval, wait_for_settlement]


@dataclass
class Showcase:
    """Runs scenarios with shared observers; ``rng`` varies latencies and token counts."""

    observers: Sequence[LoopObserver]
    rng: random.Random
    latency_s: float = 0.0
    agent_name: str = "travel-assistant"
    team_budget: SharedBudget = field(
        default_factory=lambda: SharedBudget(scopes={"team": Budget(usd=1_000.0)})
    )
    """A budget shared by the team's runs (in this process: an in-memory ledger)."""

    def _usage(self, base_in: int, base_out: int) -> Usage:
        jitter = self.rng.uniform(0.8, 1.25)
        cached = int(base_in * 0.4) if self.rng.random() < 0.5 else 0
        return Usage(
            input_tokens=int(base_in * jitter),
            output_tokens=int(base_out * jitter),
            cache_read_input_tokens=cached,
            reasoning_output_tokens=int(base_out * 0.2),
        )

    def loop(
        self,
        steps: Sequence[Step],
        *,
        context_window: int | None = None,
        budget: Budget | None = None,
        shared_budget: SharedBudget | None = None,
    ) -> AgentLoop:
        """An agent loop on a fresh scripted model, with the shared observers."""
        client: LlmClient = ScriptedClient(
            steps,
            chunk_size=self.rng.choice((6, 8, 12)),
            latency_s=self.latency_s * self.rng.uniform(0.5, 2),
        )
        return AgentLoop(
            client,
            model="gpt-4o-mini",
            tools=showcase_tools(),
            system_prompt=SYSTEM_PROMPT,
            observers=self.observers,
            agent_name=self.agent_name,
            fallback_models=["claude-haiku"],
            context_window=context_window,
            budget=budget,
            shared_budget=shared_budget,
        )

    # -- scenarios ---------------------------------------------------------------------------
    async def research(self) -> list[RunResult]:
        """Thinking, parallel tool calls, an unknown tool and an invalid argument, an answer."""
        loop = self.loop(
            [
                Reply(
                    thinking="The user wants a city break; compare two cities.",
                    text="Let me look up both cities.",
                    tool_calls=(
                        ToolCall("search", {"query": "lisbon"}),
                        ToolCall("search", {"query": "porto", "limit": "many"}),
                        ToolCall("fetch_page", {"url": "https://example.test/lisbon"}),
                        ToolCall("weather", {"city": "lisbon"}),
                    ),
                    usage=self._usage(420, 60),
                ),
                Reply(
                    thinking="",
                    text="Lisbon suits a short city break: trams, tiles and pastries; Porto is "
                    "better for wine lovers.",
                    usage=self._usage(900, 40),
                ),
            ]
        )
        return [await loop.run("Lisbon or Porto for a weekend?")]

    async def flaky(self) -> list[RunResult]:
        """A rate-limited model call recovered by fallback, and a tool that raises.

        The run's USD budget cannot apply to the fallback (``claude-haiku`` has no price):
        one ``on_budget_unpriced``, and the run is not stopped by it.
        """
        loop = self.loop(
            [
                Fail(RateLimited("429 Too Many Requests", retry_after=1.0, provider="scripted")),
                Reply(
                    text="Checking the rate.",
                    tool_calls=(ToolCall("exchange_rate", {"base": "EUR", "quote": "GBP"}),),
                    usage=self._usage(380, 25),
                ),
                Fail(StreamError("connection reset mid-stream", provider="scripted")),
                Reply(
                    text="I could not get a EUR/GBP rate; please try again later.",
                    usage=self._usage(520, 30),
                ),
            ],
            budget=Budget(usd=5.0),
        )
        return [await loop.run("How much is 300 EUR in GBP?")]

    async def switch(self) -> list[RunResult]:
        """Two runs on one session, with a model switch in between."""
        loop = self.loop(
            [
                Reply(text="Your limit is 2000 EUR.", usage=self._usage(300, 12)),
                Reply(text="The approver is finance@example.test.", usage=self._usage(340, 14)),
            ]
        )
        first = await loop.run("What is my expense limit?")
        loop.switch_model("gpt-4o")
        second = await loop.run("Who approves expenses?", session=first.session)
        return [first, second]

    async def compaction(self) -> list[RunResult]:
        """A long browsing session that crosses the context threshold and gets compacted."""
        pages = list(_PAGES)
        steps: list[Step] = []
        for i, url in enumerate(pages):
            steps.append(
                Reply(
                    text=f"Reading page {i + 1}.",
                    tool_calls=(ToolCall("fetch_page", {"url": url}),),
                    usage=Usage(input_tokens=300 + 330 * i, output_tokens=20),
                )
            )
        steps.append(
            Reply(
                text="All three cities are worth it; Faro for beaches.",
                usage=Usage(input_tokens=600, output_tokens=30),
            )
        )
        loop = self.loop(steps, context_window=1200)
        return [await loop.run("Summarise the three city guides.")]

    async def runaway(self) -> list[RunResult]:
        """A model that keeps re-reading the same file until the detector stops it."""
        steps: list[Step] = [
            Reply(
                text="Let me check the config again.",
                tool_calls=(ToolCall("read_file", {"path": "expenses/config.yaml"}),),
                usage=self._usage(350 + 40 * i, 18),
            )
            for i in range(12)
        ]
        loop = self.loop(steps)
        return [await loop.run("Is a 2500 EUR hotel within policy?")]

    async def converged(self) -> list[RunResult]:
        """The same question asked again and again on one session: answers converge."""
        answer = "Your expense limit is 2000 EUR per trip, approved by finance."
        steps: list[Step] = [
            Reply(text=answer, usage=self._usage(300 + 30 * i, 15)) for i in range(4)
        ]
        loop = self.loop(steps)
        results: list[RunResult] = []
        session = Conversation()
        for _ in range(4):
            results.append(await loop.run("What is my limit, really?", session=session))
        return results

    async def approval(self) -> list[RunResult]:
        """A payment that parks on a human approval, then resumes with the answer."""
        loop = self.loop(
            [
                Reply(
                    text="This needs approval.",
                    tool_calls=(
                        ToolCall("request_approval", {"amount": 480.0, "vendor": "Hotel Avenida"}),
                    ),
                    usage=self._usage(410, 30),
                ),
                Reply(text="Approved: the hotel is booked.", usage=self._usage(470, 12)),
            ]
        )
        parked = await loop.run("Book Hotel Avenida for 480 EUR.")
        assert parked.checkpoint is not None
        resumed = await loop.resume(parked.checkpoint, {"approved": True, "note": "within policy"})
        return [parked, resumed]

    async def settlement(self) -> list[RunResult]:
        """A tool that sleeps until a payment settles; the run resumes after waking."""
        payment = f"pay-{self.rng.randrange(10**6):06d}"
        loop = self.loop(
            [
                Reply(
                    text="Waiting for the payment to settle.",
                    tool_calls=(ToolCall("wait_for_settlement", {"payment_id": payment}),),
                    usage=self._usage(390, 20),
                ),
                Reply(text="The payment has settled.", usage=self._usage(430, 10)),
            ]
        )
        parked = await loop.run(f"Tell me when {payment} settles.")
        checkpoint = parked.checkpoint
        assert checkpoint is not None
        assert checkpoint.wake_at is not None
        delay = (checkpoint.wake_at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
        await asyncio.sleep(max(0.0, delay))
        return [parked, await loop.resume(checkpoint)]

    async def concierge(self) -> list[RunResult]:
        """A session: an MCP server's tools (one call refused), context providers (one too
        slow, skipped), an injected hint, a full inbox, a reset.

        Skipped (no runs) when the ``mcp`` extra is not installed.
        """
        try:
            from loopobs.mcp import McpStdio
        except ImportError:
            return []
        from loopobs.loop.context_providers import ProviderSpec
        from loopobs.sessions.session import AgentSession

        async def traveller_profile(query: str) -> str:
            return "The traveller holds an EU passport and flies from Lisbon."

        async def loyalty_points(query: str) -> str:
            await asyncio.sleep(1.0)  # a slow backend: skipped at its timeout, every time
            return "1200 points"

        client = ScriptedClient(
            [
                Reply(
                    text="Let me check the entry rules.",
                    tool_calls=(
                        ToolCall("visa_rules", {"country": "Brazil"}),
                        ToolCall("plug_type", {"country": "Brazil"}),
                        ToolCall("plug_type", {"nation": "Brazil"}),
                    ),  # refused
                    usage=self._usage(520, 30),
                ),
                Reply(
                    text="No visa is needed for up to 90 days; bring a type N plug adapter.",
                    usage=self._usage(640, 24),
                ),
                Reply(
                    text="India: apply for the e-Visa online, at least four days ahead.",
                    usage=self._usage(700, 18),
                ),
            ],
            chunk_size=self.rng.choice((6, 8, 12)),
            latency_s=self.latency_s,
        )
        providers = [
            ProviderSpec(traveller_profile, "traveller_profile"),
            ProviderSpec(loyalty_points, "loyalty_points", 0.02),
        ]
        loop = AgentLoop(
            client,
            model="gpt-4o-mini",
            tools=showcase_tools(),
            system_prompt=SYSTEM_PROMPT,
            observers=self.observers,
            agent_name=self.agent_name,
            context_providers=providers,
            tool_sources=[
                McpStdio(
                    sys.executable,
                    ["-m", "loopobs.demo.mcp_server"],
                    name="travel-facts",
                    env=_import_path(),
                )
            ],
        )
        # An inbox of one message: the first send fills it (a "saturated" event).
        async with loop, AgentSession(loop, queue_size=1) as session:
            first = await (await session.send("Do I need a visa for Brazil?"))
            session.inject("The traveller prefers one-sentence answers.")
            second = await (await session.send("And for India?"))
            await session.reset()  # the next traveller starts afresh
        return [first, second]

    async def overspend(self) -> list[RunResult]:
        """A research spree over a growing context, stopped by its budget before it overspends.

        Every search is new (nothing repeats for the detector); the USD budget warns at
        half and refuses the call that would cross it.
        """
        steps: list[Step] = [
            Reply(
                text=f"Searching more ({i + 1}).",
                tool_calls=(ToolCall("search", {"query": f"hotel deal {i}"}),),
                usage=Usage(input_tokens=400 + 300 * i, output_tokens=25),
            )
            for i in range(12)
        ]
        loop = self.loop(
            steps, budget=Budget(usd=0.0005, warn_at=0.5), shared_budget=self.team_budget
        )
        team = Conversation(attribution={"team": "travel-desk"})
        return [await loop.run("Find me the cheapest hotel deal in Lisbon.", session=team)]


def _import_path() -> dict[str, str]:
    """PYTHONPATH for a child process that must import this very loopobs (also uninstalled)."""
    root = str(Path(__file__).resolve().parents[2])
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([root, inherited] if inherited else [root])}


Scenario = Callable[[Showcase], Awaitable[list[RunResult]]]

SCENARIOS: dict[str, Scenario] = {
    "research": Showcase.research,
    "flaky": Showcase.flaky,
    "switch": Showcase.switch,
    "compaction": Showcase.compaction,
    "runaway": Showcase.runaway,
    "converged": Showcase.converged,
    "approval": Showcase.approval,
    "settlement": Showcase.settlement,
    "overspend": Showcase.overspend,
    "concierge": Showcase.concierge,
}
"""Every scenario, in the order one demo round plays them."""
