"""The ``loopobs`` command.

- ``loopobs demo``: the scripted showcase agent with every exporter attached:
  ``/metrics`` on 127.0.0.1, traces over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT``
  is set (else a trace tree per run in the terminal), ``--jsonl FILE`` for the
  event log; ``--base-url`` runs the same agent against a real model server.
- ``loopobs replay FILE``: re-emits a recorded event log as spans, over OTLP
  when an endpoint is set (else a tree per run in the terminal): the same trace
  tree with the recorded timestamps. It waits for the exporter every half queue,
  so no span is dropped, and exits 1 with one line unless every span was
  exported. A run the log leaves unfinished ends at its last recorded event
  with error type ``RunIncomplete``; Ctrl-C flushes what was read, says how far
  it got and exits 130. Metrics only with ``--metrics``: they are counted at
  replay time, so replaying a log twice counts it twice.
- ``loopobs inspect FILE``: prints each recorded run as a tree, and totals.
- ``loopobs report FILE [-o report.html]``: one self-contained HTML page of the
  log's runs: a waterfall per run, a sortable table, totals.

Text from a log (tool names, errors, paths) is printed with control characters
escaped, so a log cannot retitle, clear or forge the terminal.

Bad flags and unreachable endpoints end with a one-line error and exit code 2
(usage) or 1 (everything else), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import re
import signal
import socket
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn
from uuid import UUID

from loopobs.contract.errors import LoopError
from loopobs.contract.events import EventContext, RunEndContext, RunStartContext, RunStatus
from loopobs.contract.observer import EventSink, LoopObserver, ObserverSet

__all__ = ["main"]


class CliError(Exception):
    """A problem to report in one line, with exit code 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def _positive(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a duration (0 or more seconds)")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="loopobs", description="Observability for LLM agent loops.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the scripted showcase agent with every exporter")
    demo.add_argument(
        "--runs",
        type=_positive,
        default=None,
        help="rounds of the showcase scenarios to play, then exit (default: one "
        "round, then keep serving /metrics until Ctrl-C)",
    )
    demo.add_argument(
        "--exit",
        action="store_true",
        help="exit after the runs instead of serving /metrics until Ctrl-C",
    )
    demo.add_argument(
        "--forever", action="store_true", help="steady random traffic for dashboards, until Ctrl-C"
    )
    demo.add_argument("--seed", type=_int, default=None, help="seed for the randomness")
    demo.add_argument(
        "--metrics-port",
        type=_port,
        default=9464,
        help="port of /metrics (default 9464; 0 picks a free one)",
    )
    demo.add_argument(
        "--metrics-addr", default="127.0.0.1", help="address /metrics binds to (default 127.0.0.1)"
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("loopobs-demo"),
        help="folder for the event log and the HTML report (default ./loopobs-demo)",
    )
    demo.add_argument(
        "--jsonl",
        type=Path,
        default=None,
        help="record the event log to FILE (default OUT/demo.jsonl)",
    )
    demo.add_argument("--no-live", action="store_true", help="no live status line")
    demo.add_argument("--quiet", action="store_true", help="no per-run trees")
    demo.add_argument(
        "--latency",
        type=_seconds,
        default=None,
        help="scripted model latency, seconds (default 0.02; 0.05 with --forever)",
    )
    demo.add_argument(
        "--base-url",
        default=None,
        help="run against a real model server (OpenAI-compatible or Anthropic)",
    )
    demo.add_argument("--model", default=None, help="model name for --base-url")
    demo.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        default="openai",
        help="API of --base-url (default openai)",
    )
    demo.add_argument(
        "--framework",
        choices=("loopobs", "langgraph"),
        default="loopobs",
        help="the agent to watch: loopobs's own loop (default) or a LangGraph "
        "ReAct graph through the LangChain adapter (needs loopobs[langchain])",
    )

    replay = sub.add_parser("replay", help="re-emit a recorded event log into the exporters")
    replay.add_argument("file", type=Path)
    replay.add_argument("--skip-invalid", action="store_true", help="skip malformed lines")
    replay.add_argument(
        "--metrics",
        action="store_true",
        help="also export metrics (counted at replay time: replaying a log twice counts it twice)",
    )

    inspect = sub.add_parser("inspect", help="print each recorded run as a tree, and totals")
    inspect.add_argument("file", type=Path)
    inspect.add_argument("--skip-invalid", action="store_true", help="skip malformed lines")

    report = sub.add_parser("report", help="write a self-contained HTML report of an event log")
    report.add_argument("file", type=Path)
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the HTML file to write (default: FILE with .html)",
    )
    report.add_argument(
        "--no-content",
        action="store_true",
        help="leave prompts, answers and tool arguments out of the report",
    )
    report.add_argument("--skip-invalid", action="store_true", help="skip malformed lines")
    return parser


# -- exporters ---------------------------------------------------------------------------------
def _check_reachable(url: str, what: str) -> None:
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=3.0):
            pass
    except OSError as exc:
        raise CliError(f"cannot reach {what} at {host}:{port}: {exc.strerror or exc}") from None


class _Exporters:
    """The exporters a command attaches, and their orderly shutdown."""

    def __init__(self) -> None:
        self.observers: list[LoopObserver] = []
        self._closers: list[Callable[[], object]] = []

    def tracing(
        self, write: Callable[[str], None] | None, *, quiet: bool, replaying: bool = False
    ) -> None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        )
        if endpoint:
            _check_reachable(endpoint, "the OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)")
            from loopobs.exporters.setup import configure

            # A replay emits every run from one task, so spans must not become current.
            handle = configure(default_service_name="loopobs-demo", propagate_context=not replaying)
            self.observers.extend(handle.observers)
            self._closers.append(lambda: handle.shutdown(timeout_s=5.0))
        elif not quiet:
            from loopobs.exporters.console import ConsoleTreeObserver

            self.observers.append(ConsoleTreeObserver(writer=write))

    def prometheus(self, port: int, addr: str) -> int:
        from loopobs.exporters.metrics_server import start_metrics_server
        from loopobs.exporters.prometheus import PrometheusObserver

        observer = PrometheusObserver()
        try:
            server = start_metrics_server(port=port, addr=addr, registry=observer.registry)
        except OSError as exc:
            raise CliError(
                f"cannot serve /metrics on {addr}:{port}: {exc.strerror or exc}"
            ) from None
        self.observers.append(observer)
        self._closers.append(server.close)
        return int(server.port)

    def jsonl(self, path: Path) -> None:
        from loopobs.exporters.jsonl import JsonlRecorder

        try:
            recorder = JsonlRecorder(path)
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
        self.observers.append(recorder)

    def flush(self) -> None:
        """Write what the exporters hold (the event log above all), keeping them open."""
        try:
            ObserverSet(self.observers).force_flush(timeout_s=5.0)
        except Exception as exc:
            print(f"loopobs: warning: flush: {exc}", file=sys.stderr)

    def close(self) -> None:
        errors: list[str] = []
        group = ObserverSet(self.observers)
        try:
            group.shutdown(timeout_s=5.0)
        except Exception as exc:
            errors.append(str(exc))
        for close in self._closers:
            try:
                close()
            except Exception as exc:
                errors.append(str(exc))
        if errors:
            print(f"loopobs: warning: shutdown: {'; '.join(errors)}", file=sys.stderr)


# -- demo ----------------------------------------------------------------------------------
def _demo_log(args: argparse.Namespace) -> Path:
    """Where the demo records its events; its default log starts afresh on every demo."""
    if args.jsonl is not None:
        return Path(args.jsonl)
    log_path = Path(args.out) / "demo.jsonl"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.unlink(missing_ok=True)
    except OSError as exc:
        raise CliError(f"cannot write {log_path}: {exc.strerror or exc}") from None
    return log_path


async def _demo(args: argparse.Namespace, log_path: Path) -> int:
    from loopobs.demo.live import LiveView

    live = LiveView(enabled=not args.no_live)
    exporters = _Exporters()
    stay = not (args.exit or args.forever or args.runs is not None)
    try:
        port = exporters.prometheus(args.metrics_port, args.metrics_addr)
        metrics_url = f"http://{args.metrics_addr}:{port}/metrics"
        exporters.tracing(live.write, quiet=args.quiet)
        exporters.jsonl(log_path)
        live.write(f"loopobs demo: /metrics on {metrics_url}, event log in {log_path}")
        try:
            await _play(args, [live, *exporters.observers], live)
        except asyncio.CancelledError:
            stay = False
            live.write("loopobs demo: stopping (flushing exporters)")
        live.close()
        print(live.summary())
        exporters.flush()  # the report reads the event log from disk
        report = _demo_report(log_path)
        prometheus_yml = _prometheus_config(log_path.parent, metrics_url)
        print(_where_to_look(metrics_url, log_path, report, prometheus_yml))
        if stay:
            print(
                f"loopobs demo: serving {metrics_url} until Ctrl-C (--exit stops after the runs)",
                flush=True,
            )
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
    finally:
        live.close()
        exporters.close()
    return 0


async def _play(args: argparse.Namespace, observers: Sequence[LoopObserver], live: Any) -> None:
    from loopobs.demo.showcase import SCENARIOS, Showcase

    rng = random.Random(args.seed)
    latency = args.latency if args.latency is not None else (0.05 if args.forever else 0.02)
    runs = args.runs if args.runs is not None else 1
    if args.base_url:
        await _real_model(args, observers, live, runs)
        return
    if args.framework == "langgraph":
        try:
            from loopobs.demo.framework_langgraph import play
        except ImportError as exc:
            raise CliError(str(exc)) from None
        await play(observers, rng, runs, live.write)
        return
    showcase = Showcase(observers, rng, latency_s=latency)
    names = list(SCENARIOS)
    rounds = 0
    while args.forever or rounds < runs:
        order = rng.sample(names, k=len(names)) if args.forever else names
        for name in order:
            await SCENARIOS[name](showcase)
            if args.forever:
                await asyncio.sleep(rng.uniform(0.05, 0.3))
        rounds += 1


def _demo_report(log_path: Path) -> Path | None:
    from loopobs.report import write_report

    target = log_path.with_suffix(".html")
    try:
        write_report(log_path, target, skip_invalid=True)
    except OSError as exc:
        print(
            f"loopobs: warning: no report: cannot write {target}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return None
    return target


def _where_to_look(
    metrics_url: str, log_path: Path, report: Path | None, prometheus_yml: Path | None
) -> str:
    lines = ["", "Where to look:", f"  metrics     {metrics_url}"]
    if report is not None:
        lines.append(f"  report      {report.resolve().as_uri()}  (open in a browser)")
    lines += [
        f"  event log   {log_path}  (loopobs inspect {log_path})",
        "  traces      set OTEL_EXPORTER_OTLP_ENDPOINT to send them to Jaeger or Phoenix,",
        f"              or replay the log later: loopobs replay {log_path}",
    ]
    if prometheus_yml is not None:
        lines.append(f"  prometheus  prometheus --config.file={prometheus_yml}  (scrapes it)")
    lines += [
        "  dashboards  import grafana/dashboards/loopobs-overview.json into Grafana, or run the",
        "              whole stack: docker compose -f grafana/docker-compose.yml up (see grafana/)",
    ]
    return "\n".join(lines)


def _prometheus_config(folder: Path, metrics_url: str) -> Path | None:
    """A minimal Prometheus configuration that scrapes this demo, beside its event log."""
    target = urllib.parse.urlsplit(metrics_url).netloc
    path = folder / "prometheus.yml"
    text = (
        "# Written by `loopobs demo`: scrapes the demo's /metrics.\n"
        "global:\n  scrape_interval: 5s\n"
        "scrape_configs:\n  - job_name: loopobs\n"
        f'    static_configs:\n      - targets: ["{target}"]\n'
    )
    try:
        path.write_text(text, encoding="utf-8")
    except OSError:
        return None
    return path


async def _real_model(
    args: argparse.Namespace, observers: Sequence[LoopObserver], live: Any, runs: int
) -> None:
    from loopobs.demo.showcase import SYSTEM_PROMPT, showcase_tools
    from loopobs.loop.loop import AgentLoop
    from loopobs.loop.run import RunStatus

    if not args.model:
        raise CliError("--base-url needs --model NAME")
    _check_reachable(args.base_url, "the model server (--base-url)")
    client: Any
    if args.provider == "anthropic":
        from loopobs.llm.anthropic import AnthropicClient

        client = AnthropicClient(base_url=args.base_url)
    else:
        from loopobs.llm.openai import OpenAIClient

        client = OpenAIClient(base_url=args.base_url)
    loop = AgentLoop(
        client,
        model=args.model,
        tools=showcase_tools(),
        system_prompt=SYSTEM_PROMPT,
        observers=observers,
        agent_name="travel-assistant",
        max_turns=8,
    )
    questions = [
        "Lisbon or Porto for a weekend? Use the search tool.",
        "What does the expenses config say? Read expenses/config.yaml.",
    ]
    rounds = 0
    while args.forever or rounds < runs:
        for question in questions:
            result = await loop.run(question)
            if result.status is RunStatus.FAILED and result.turns == 0 and result.error:
                raise CliError(f"the model server failed: {result.error}")
            live.write(f"answer: {result.answer}")
        rounds += 1


def _run_demo(args: argparse.Namespace) -> int:
    log_path = _demo_log(args)

    async def guarded() -> int:
        task = asyncio.current_task()
        assert task is not None
        running = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                running.add_signal_handler(sig, task.cancel)
        try:
            return await _demo(args, log_path)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    running.remove_signal_handler(sig)

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        return 0


# -- replay and inspect ----------------------------------------------------------------------
# Characters a terminal acts on: C0/C1 controls (ESC starts every escape sequence), DEL,
# bidirectional overrides (they reorder what is shown), and lone surrogates (unprintable).
_CONTROLS = r"\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE_IN_FIELD = re.compile(rf"[\n{_CONTROLS}]")
_UNSAFE_IN_OUTPUT = re.compile(rf"[{_CONTROLS}]")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_for_terminal(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character a terminal would act on written as a visible escape.

    Escape sequences (retitling, clearing the screen, moving the cursor), bidi
    overrides and lone surrogates become ``\\x1b``-style text; with
    ``keep_newlines`` line feeds stay (for text the CLI laid out itself).
    """
    pattern = _UNSAFE_IN_OUTPUT if keep_newlines else _UNSAFE_IN_FIELD
    return pattern.sub(_escape_char, text)


def _print_safe(text: str, *, file: Any = None) -> None:
    print(escape_for_terminal(text, keep_newlines=True), file=file)


def _safe_event(ctx: EventContext) -> EventContext:
    """``ctx`` with its text fields escaped, so a renderer lays out what a log cannot forge."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(ctx):
        value = getattr(ctx, f.name)
        if isinstance(value, str):
            escaped = escape_for_terminal(value)
            if escaped != value:
                changes[f.name] = escaped
    return dataclasses.replace(ctx, **changes) if changes else ctx


class RunIncomplete(LoopError):
    """The event log ends before this run ended (the recorder stopped, or replay was interrupted).

    Replay closes such a run at its last recorded event with this error, so its
    spans end when the record ends (not when the replay runs) and say why.
    """


class _Replayer(EventSink):
    """Feeds a log's events to the exporters, closes unfinished runs, and applies backpressure.

    Every ``flush_every`` spans ended, it waits for the span exporters to take
    them (a bounded flush), so a log of any length fits the batch queue.
    """

    def __init__(self, target: LoopObserver, *, safe: bool, telemetry: Any = None) -> None:
        self.target = target
        self.safe = safe
        self.telemetry = telemetry
        self.events = 0
        self.open_runs: dict[UUID, int] = {}
        self.closed_incomplete = 0
        self._flushed_at = 0
        self.flush_every = 0
        self.flush_timeout_s = 60.0
        if telemetry is not None and telemetry.settings is not None:
            self.flush_every = max(1, telemetry.settings.max_queue_size // 2)
            self.flush_timeout_s = max(30.0, 4 * telemetry.settings.traces_timeout_s)

    def on_event(self, ctx: EventContext) -> None:
        if isinstance(ctx, RunStartContext):
            self.open_runs[ctx.run_id] = ctx.time_ns
        elif isinstance(ctx, RunEndContext):
            self.open_runs.pop(ctx.run_id, None)
        elif ctx.run_id in self.open_runs:
            self.open_runs[ctx.run_id] = max(self.open_runs[ctx.run_id], ctx.time_ns)
        getattr(self.target, ctx.hook)(_safe_event(ctx) if self.safe else ctx)
        self.events += 1
        if self.flush_every:
            ended = self.telemetry.span_delivery().ended
            if ended - self._flushed_at >= self.flush_every:
                self.flush()
                self._flushed_at = ended

    def flush(self) -> None:
        """Wait until the span exporters took every span ended so far; stop on refusal."""
        if self.telemetry is None:
            return
        if not self.telemetry.flush_spans(self.flush_timeout_s):
            raise CliError(
                f"the OTLP endpoint did not take the spans within "
                f"{self.flush_timeout_s:.0f} s (after {self.events} events)"
            )
        delivery = self.telemetry.span_delivery()
        if delivery.failed:
            raise CliError(
                f"the OTLP endpoint refused {delivery.failed} of "
                f"{delivery.expected} spans (after {self.events} events); "
                "see the exporter's log line above"
            )

    def close_open_runs(self) -> None:
        """End every run whose end the log lacks, at its last recorded event, as incomplete."""
        for run_id, last_ns in list(self.open_runs.items()):
            end = RunEndContext(
                run_id=run_id,
                time_ns=last_ns,
                success=False,
                status=RunStatus.FAILED,
                error=RunIncomplete("the event log ends before this run ended"),
            )
            self.target.on_run_end(end)
            self.closed_incomplete += 1
        self.open_runs.clear()


def _otlp_endpoint() -> str | None:
    return (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or None
    )


def _check_scheme(endpoint: str) -> None:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    scheme = urllib.parse.urlsplit(endpoint).scheme
    if protocol != "grpc" and scheme not in ("http", "https"):
        raise CliError(
            f"the OTLP endpoint {escape_for_terminal(endpoint)!r} needs a scheme "
            "(http:// or https://) for OTLP/HTTP"
        )


REPLAY_EXPORT_TIMEOUT_S = 60.0
"""Replay's per-request deadline unless ``OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`` sets one.

A receiver at capacity answers 503 and the exporter retries with backoff until
this deadline: a replay outpaces any live loop, so it waits longer than the
SDK's 10 s before calling a batch lost.
"""


def _replay_timeout() -> float | None:
    if any(
        os.environ.get(name, "").strip()
        for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    ):
        return None
    return REPLAY_EXPORT_TIMEOUT_S


def _replay(args: argparse.Namespace) -> int:
    from loopobs.exporters.jsonl import replay

    endpoint = _otlp_endpoint()
    telemetry: Any = None
    observers: list[LoopObserver] = []
    if endpoint:
        _check_scheme(endpoint)
        _check_reachable(endpoint, "the OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)")
        from loopobs.exporters.setup import configure

        # A replay emits every run from one task, so spans must not become current.
        # Metrics only on request: they would be stamped at replay time and count twice
        # when a log is replayed twice; spans keep their recorded timestamps.
        telemetry = configure(
            default_service_name="loopobs-demo",
            propagate_context=False,
            metrics_exporter=None if args.metrics else "none",
            export_timeout_s=_replay_timeout(),
        )
        observers.append(telemetry.tracing)
        if args.metrics:
            observers.append(telemetry.metrics)
    else:
        print(
            "loopobs replay: no exporter configured (set OTEL_EXPORTER_OTLP_ENDPOINT to send "
            "the spans to a collector); showing the console view instead",
            file=sys.stderr,
        )
        from loopobs.exporters.console import ConsoleTreeObserver

        observers.append(ConsoleTreeObserver(writer=_print_safe))
    replayer = _Replayer(ObserverSet(observers), safe=telemetry is None, telemetry=telemetry)
    interrupted = False
    stats = None
    try:
        try:
            stats = replay(args.file, replayer, skip_invalid=args.skip_invalid)
        except KeyboardInterrupt:
            interrupted = True
        replayer.close_open_runs()
        replayer.flush()
    finally:
        closed = True
        if telemetry is not None:
            closed = telemetry.shutdown(timeout_s=replayer.flush_timeout_s)
    where = escape_for_terminal(str(args.file))
    incomplete = (
        f", {replayer.closed_incomplete} unfinished runs closed at their last event"
        if replayer.closed_incomplete
        else ""
    )
    exported = ""
    if telemetry is not None:
        delivery = telemetry.span_delivery()
        if not closed or not delivery.complete:
            raise CliError(
                f"replay lost spans: exported {delivery.exported} of {delivery.expected} "
                f"(refused {delivery.failed}, dropped {delivery.dropped}) after "
                f"{replayer.events} events of {where}"
            )
        exported = f", {delivery.exported} spans exported"
    if interrupted:
        print(
            f"loopobs: interrupted after {replayer.events} events of {where}{exported}{incomplete}",
            file=sys.stderr,
        )
        return 130
    assert stats is not None
    skipped = f", {stats.skipped} bad lines skipped" if stats.skipped else ""
    print(f"replayed {stats.events} events from {where}{exported}{skipped}{incomplete}")
    return 0


class _Collect(EventSink):
    def __init__(self) -> None:
        self.runs: dict[UUID, list[EventContext]] = {}
        self.ended: set[UUID] = set()

    def on_event(self, ctx: EventContext) -> None:
        self.runs.setdefault(ctx.run_id, []).append(_safe_event(ctx))
        if isinstance(ctx, RunEndContext):
            self.ended.add(ctx.run_id)


def _inspect(args: argparse.Namespace) -> int:
    from loopobs.exporters.console import render_run, summarise_runs
    from loopobs.exporters.jsonl import replay

    collect = _Collect()
    stats = replay(args.file, collect, skip_invalid=args.skip_invalid)
    summaries = []
    for run_id, events in collect.runs.items():
        text, summary = render_run(events)
        summaries.append(summary)
        _print_safe(text)
        if run_id not in collect.ended:
            print("  (unfinished: the log ends before this run ended)")
    _print_safe(f"total: {summarise_runs(summaries)}")
    if stats.skipped:
        print(f"{stats.skipped} malformed lines skipped")
    return 0


def _report(args: argparse.Namespace) -> int:
    from loopobs.report import write_report

    target = args.output if args.output is not None else args.file.with_suffix(".html")
    if target.resolve() == args.file.resolve():
        raise CliError(f"the report would overwrite the log {args.file}; name it with -o")
    stats = write_report(
        args.file, target, content=not args.no_content, skip_invalid=args.skip_invalid
    )
    skipped = f", {stats.skipped} malformed lines skipped" if stats.skipped else ""
    print(f"wrote {target}: {stats.runs} runs, {stats.events} events{skipped}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loopobs`` console script; returns the exit code."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            return _run_demo(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "report":
            return _report(args)
        return _inspect(args)
    except CliError as exc:
        _print_safe(f"loopobs: error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(
            f"loopobs: error: {exc.name or exc} is not installed; the command needs the "
            "extras: pip install 'loopobs[all]'",
            file=sys.stderr,
        )
        return 1
    except (OSError, ValueError) as exc:
        _print_safe(f"loopobs: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
