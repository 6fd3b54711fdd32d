"""One MCP server's connection, and its tools as loop tools.

:class:`McpToolSource` owns a connection to one server. The connection lives in
a task of its own (the SDK's transports and sessions must be entered and left
by the same task), which holds the child process, HTTP session or SSE stream
open until :meth:`McpToolSource.aclose`; closing ends the task, which closes the
session, terminates the process (the SDK ends its whole process tree), deletes
the HTTP session or hangs up the SSE stream. A closed or crashed connection
leaves no process behind.

Failures become tool results the model sees (:class:`~loopobs.contract.errors.McpError`):
a server that cannot be started at connect fails the connect (so the run does
not start); a server that goes away mid-call fails that call with
``connection_closed`` and is marked down; its next call starts it again (up to
``restarts`` times, then ``server_down`` for good). JSON-RPC errors are
``protocol`` errors with their ``code``, a request past the server's
``timeout`` is ``timeout``, and a tool's own ``isError`` result is
``tool_error`` with the server's text.

Each call records :class:`~loopobs.contract.events.McpCallInfo` on the current tool
call, which becomes ``ToolPostContext.mcp`` (the MCP attributes of the
``execute_tool`` span and the ``mcp.client.operation.duration`` metric), and
sends the current trace context (``traceparent``) in ``params._meta``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import mcp_types as mt
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from loopobs.contract.errors import McpError
from loopobs.contract.events import McpCallInfo, ToolAnnotations
from loopobs.contract.tools import Output, Tool, ToolReturn, current_tool_call

__all__ = ["McpTool", "McpToolSource", "ServerSpec"]


class ServerSpec(Protocol):
    """What a connection needs of a server description (:mod:`loopobs.mcp.servers` has them).

    Kept as a protocol so that this module depends on no description class: the
    descriptions import this module to connect, never the other way round.
    """

    @property
    def label(self) -> str:
        """The server's name in errors and telemetry."""
        ...

    @property
    def address(self) -> tuple[str | None, int | None]:
        """Host and port of a server reached over the network; ``(None, None)`` for a child."""
        ...

    timeout: float
    connect_timeout: float
    restarts: int

    def tool_name(self, remote: str) -> str:
        """The name the model sees for the server's tool ``remote``."""
        ...

    def open_transport(
        self, stack: contextlib.AsyncExitStack, on_session: Callable[[str | None], None]
    ) -> Any:
        """The SDK transport (an async context manager yielding the read and write streams)."""
        ...


logger = logging.getLogger("loopobs.mcp")

_PROPAGATOR = TraceContextTextMapPropagator()
_CALL_KEY = "io.loopobs/tool_call_id"
"""A ``_meta`` key naming the loop's tool call, so the request id can be read off the wire."""


class _WriteTap:
    """The transport's write stream, noting the JSON-RPC id of each tool call it sends."""

    def __init__(self, inner: Any, ids: dict[str, str]) -> None:
        self._inner = inner
        self._ids = ids

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        params = getattr(message, "params", None)
        if isinstance(params, Mapping):
            meta = params.get("_meta")
            if isinstance(meta, Mapping) and _CALL_KEY in meta:
                self._ids[str(meta[_CALL_KEY])] = str(getattr(message, "id", ""))
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _WriteTap:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


MAX_LIST_PAGES = 1_000
"""Pages of ``tools/list`` one listing may take; a server that paginates past it fails."""
MAX_TOOLS = 50_000
"""Tools one listing may hold; a server that lists more fails."""
CLOSE_GRACE_S = 10.0
"""Seconds a closing connection is given to end on its own (the SDK ends a stdio process
within about 7 s), then again after it is cancelled; past both it is abandoned, logged."""


class _Connection:
    """One live connection, held open by its owner task until :meth:`close`."""

    def __init__(self, spec: ServerSpec, on_tools: Any) -> None:
        self.spec = spec
        self.session: ClientSession | None = None
        self.protocol_version: str | None = None
        self.session_id: str | None = None
        self.tools: list[mt.Tool] = []
        self.down: str | None = None
        self.request_ids: dict[str, str] = {}
        self.listings = 0
        """``tools/list`` listings started (the connect's and the refreshes')."""
        self._on_tools = on_tools
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self._refresh_wanted = False
        self._closer: asyncio.Task[None] | None = None
        self._task = asyncio.create_task(self._own(), name=f"mcp:{spec.label}")

    async def wait_ready(self) -> None:
        """Wait for the handshake and the first listing, within ``connect_timeout``.

        On a timeout, an error or a cancellation of the caller, the connection is
        closed (its task cancelled, within a bound) before this returns.
        """
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.spec.connect_timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise McpError(
                f"MCP server {self.spec.label!r} did not answer the handshake and "
                f"its tool listing within {self.spec.connect_timeout:g}s",
                server=self.spec.label,
                kind="server_down",
            ) from None
        except BaseException:
            await self.close()
            raise

    async def _own(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                # The handshake is bounded by connect_timeout alone (it waits for the process
                # to start); each listing page by timeout (_list_all).
                session = await stack.enter_async_context(
                    ClientSession(
                        read, _WriteTap(write, self.request_ids), message_handler=self._on_message
                    )
                )
                await session.initialize()
                self.protocol_version = session.protocol_version
                self.tools = await self._list(session)
                self.session = session
                if not self._ready.done():
                    self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # the owner must end quietly; the reason is kept
            cause = _root_cause(exc)
            if not self._ready.done():
                self._ready.set_exception(
                    cause
                    if isinstance(cause, McpError)
                    else McpError(
                        f"MCP server {self.spec.label!r} could not be started or reached: "
                        f"{type(cause).__name__}: {cause}",
                        server=self.spec.label,
                        kind="server_down",
                    )
                )
                self._ready.exception()  # retrieved here: wait_ready may have given up
            self.down = self.down or f"{type(cause).__name__}: {cause}"
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self.session = None
            self.down = self.down or "closed"
            if self._refresher is not None:
                self._refresher.cancel()

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        return self.spec.open_transport(stack, self._note_session)

    def _note_session(self, session_id: str | None) -> None:
        if session_id:
            self.session_id = session_id

    async def _list(self, session: ClientSession) -> list[mt.Tool]:
        self.listings += 1
        return await _list_all(session, self.spec)

    async def _on_message(self, message: Any) -> None:
        # A flood of notifications coalesces: one refresh runs, and at most one more is
        # wanted after it (which then reads the newest list).
        if isinstance(message, mt.ToolListChangedNotification):
            self._refresh_wanted = True
            if self._refresher is None or self._refresher.done():
                self._refresher = asyncio.create_task(
                    self._refresh(), name=f"mcp-refresh:{self.spec.label}"
                )

    async def _refresh(self) -> None:
        while self._refresh_wanted:
            self._refresh_wanted = False
            session = self.session
            if session is None:
                return
            try:
                async with asyncio.timeout(self.spec.timeout):
                    tools = await self._list(session)
            except Exception as exc:  # the old list stays; a later notification tries again
                logger.warning(
                    "MCP server %r: refreshing its tools failed: %s",
                    self.spec.label,
                    _describe(exc, self.spec),
                )
                continue
            self.tools = tools
            self._on_tools()

    async def refreshed(self) -> None:
        """Wait until no refresh of the tool list runs or is wanted (each is timed out)."""
        while self._refresher is not None and not self._refresher.done():
            await asyncio.wait({self._refresher})

    async def close(self) -> None:
        """End the owner task (closing the session and the process); raises nothing of its own.

        Bounded: the task gets :data:`CLOSE_GRACE_S` to end on its own (at once
        cancelled if it never got ready: it may be stuck in the handshake), then is
        cancelled and gets as long again; past that it is abandoned, with a warning.
        A caller cancelled meanwhile gets its ``CancelledError`` at once; the close
        goes on in a task of its own.
        """
        self._stop.set()
        if self._task.done():
            return
        if self._closer is None:
            self._closer = asyncio.create_task(
                self._end_owner(), name=f"mcp-close:{self.spec.label}"
            )
        await asyncio.wait({self._closer})

    async def _end_owner(self) -> None:
        task = self._task
        if self._ready.done() and self._ready.exception() is None:
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
        if not task.done():
            logger.warning(
                "MCP server %r: its connection did not close within %gs; abandoned",
                self.spec.label,
                2 * CLOSE_GRACE_S,
            )


def _root_cause(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (the SDK's task groups wrap errors)."""
    inner = getattr(exc, "exceptions", None)  # an exception group (3.10: the backport's)
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def _describe(exc: BaseException, spec: ServerSpec) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"no complete listing within {spec.timeout:g}s"
    return f"{type(exc).__name__}: {exc}"


async def _list_all(session: ClientSession, spec: ServerSpec) -> list[mt.Tool]:
    """Every page of the server's tool list, within :data:`MAX_LIST_PAGES` and :data:`MAX_TOOLS`.

    Raises:
        McpError: a page was not answered within ``timeout`` (``timeout``), or the
            listing ran past a bound (``protocol``).
    """
    tools: list[mt.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        deadline = asyncio.timeout(spec.timeout)
        try:
            async with deadline:
                page = await session.list_tools(params=params)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise McpError(
                f"MCP server {spec.label!r} did not answer tools/list within {spec.timeout:g}s",
                server=spec.label,
                kind="timeout",
            ) from None
        tools.extend(page.tools)
        if len(tools) > MAX_TOOLS:
            raise McpError(
                f"MCP server {spec.label!r} lists more than {MAX_TOOLS} tools",
                server=spec.label,
                kind="protocol",
            )
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise McpError(
        f"MCP server {spec.label!r} still had another page of tools after {MAX_LIST_PAGES} pages",
        server=spec.label,
        kind="protocol",
    )


class McpToolSource:
    """A connected MCP server: its tools (refreshed on list-changed), calls, close.

    Implements :class:`~loopobs.loop.tool_sources.ConnectedSource`. Build one with
    ``await McpStdio(...).connect(emit)`` (the loop does).
    """

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self._version = 0
        self._tools: dict[str, McpTool] = {}
        self._conn: _Connection | None = None
        self._restarts = 0
        self._lock = asyncio.Lock()
        self._closed = False
        self._changed = asyncio.Event()

    async def changed(self) -> None:
        """Wait for the next change of the tool list (a list-changed refresh, a restart)."""
        await self._changed.wait()

    @classmethod
    async def connect(cls, spec: ServerSpec) -> McpToolSource:
        """Connect to ``spec``'s server and list its tools."""
        source = cls(spec)
        await source._start()
        return source

    async def _start(self) -> None:
        conn = _Connection(self.spec, self._tools_changed)
        self._conn = conn
        await conn.wait_ready()
        self._tools_changed()

    def _tools_changed(self) -> None:
        conn = self._conn
        if conn is None:
            return
        self._tools = {self.spec.tool_name(t.name): McpTool(self, t) for t in conn.tools}
        self._version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def version(self) -> int:
        """Bumped when the server's tool list changed."""
        return self._version

    @property
    def name(self) -> str:
        """The server's name."""
        return self.spec.label

    @property
    def connection(self) -> _Connection | None:
        """The current connection (None once closed)."""
        return self._conn

    def tools(self) -> Mapping[str, Tool]:
        """The server's tools, by the name the model sees."""
        return self._tools

    async def aclose(self) -> None:
        """Close the connection (the process ends); idempotent, never raises."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _session(self) -> tuple[_Connection, ClientSession]:
        """The live session, restarting a server that went away (within ``restarts``)."""
        async with self._lock:
            conn = self._conn
            if conn is not None and conn.session is not None and conn.down is None:
                return conn, conn.session
            label = self.spec.label
            if self._closed:
                raise McpError(f"MCP server {label!r} is closed", server=label, kind="server_down")
            reason = conn.down if conn is not None else "not connected"
            if self._restarts >= self.spec.restarts:
                raise McpError(
                    f"MCP server {label!r} is down ({reason}); it was restarted "
                    f"{self._restarts} time(s) already",
                    server=label,
                    kind="server_down",
                )
            self._restarts += 1
            logger.warning("MCP server %r is down (%s); starting it again", label, reason)
            if conn is not None:
                await conn.close()
            await self._start()
            conn = self._conn
            if conn is None or conn.session is None:
                raise McpError(
                    f"MCP server {label!r} closed while starting", server=label, kind="server_down"
                )
            return conn, conn.session

    async def call(self, tool: McpTool, arguments: Mapping[str, Any]) -> ToolReturn:
        """Call ``tool`` with ``arguments``; record the call on the current tool call."""
        scope = current_tool_call()
        call_id = scope.tool_call_id if scope is not None else ""
        meta: dict[str, Any] = {_CALL_KEY: call_id}
        _PROPAGATOR.inject(meta)  # the current span: execute_tool when the tracer propagates
        spec = self.spec
        started = time.perf_counter()
        conn: _Connection | None = self._conn
        status: str | None = None
        error_type: str | None = None
        try:
            conn, session = await self._session()
            result = await session.call_tool(
                tool.remote_name,
                dict(arguments),
                read_timeout_seconds=spec.timeout,
                meta=_as_meta(meta),
            )
        except MCPError as exc:
            code = exc.error.code
            status = str(code)
            if code == mt.CONNECTION_CLOSED:
                error_type, status = "connection_closed", None
                if conn is not None:
                    conn.down = conn.down or "the connection closed mid-call"
                raise McpError(
                    f"MCP server {spec.label!r} went away during the call of "
                    f"{tool.remote_name!r} (it will be started again at its next "
                    "call)",
                    tool=tool.name,
                    server=spec.label,
                    kind="connection_closed",
                    code=code,
                ) from None
            if code == mt.REQUEST_TIMEOUT:
                error_type = "timeout"
                raise McpError(
                    f"MCP server {spec.label!r} did not answer {tool.remote_name!r} "
                    f"within {spec.timeout:g}s",
                    tool=tool.name,
                    server=spec.label,
                    kind="timeout",
                    code=code,
                ) from None
            error_type = status
            raise McpError(
                f"MCP server {spec.label!r} refused {tool.remote_name!r}: "
                f"{exc.error.message} (JSON-RPC error {code})",
                tool=tool.name,
                server=spec.label,
                kind="protocol",
                code=code,
            ) from None
        except McpError as exc:
            error_type = exc.kind
            raise
        except asyncio.CancelledError:
            error_type = "cancelled"
            raise
        except Exception as exc:
            error_type = type(exc).__name__
            raise McpError(
                f"MCP call of {tool.remote_name!r} on {spec.label!r} failed: "
                f"{type(exc).__name__}: {exc}",
                tool=tool.name,
                server=spec.label,
                kind="protocol",
            ) from None
        finally:
            if scope is not None:
                scope.mcp = _info(
                    spec,
                    conn,
                    call_id,
                    status,
                    error_type,
                    (time.perf_counter() - started) * 1000.0,
                )
        text = _result_text(result)
        if getattr(result, "is_error", False):
            if scope is not None and scope.mcp is not None:
                scope.mcp = dataclasses.replace(scope.mcp, error_type="tool_error")
            raise McpError(
                text or f"the tool {tool.remote_name!r} failed",
                tool=tool.name,
                server=spec.label,
                kind="tool_error",
            )
        return Output(text)


def _as_meta(meta: dict[str, Any]) -> mt.RequestParamsMeta:
    # The TypedDict allows extra keys (traceparent, ours); mypy cannot see it from a dict.
    return meta  # type: ignore[return-value]


def _info(
    spec: ServerSpec,
    conn: _Connection | None,
    call_id: str,
    status: str | None,
    error_type: str | None,
    duration_ms: float,
) -> McpCallInfo:
    address, port = spec.address
    return McpCallInfo(
        server=spec.label,
        method="tools/call",
        transport="tcp" if address is not None else "pipe",
        protocol_version=conn.protocol_version if conn is not None else None,
        session_id=conn.session_id if conn is not None else None,
        request_id=conn.request_ids.pop(call_id, None) if conn is not None else None,
        status_code=status,
        error_type=error_type,
        server_address=address,
        server_port=port,
        duration_ms=duration_ms,
    )


def _result_text(result: Any) -> str:
    """The model's text of a tool result: its text parts, else its structured content."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        if isinstance(block, mt.TextContent):
            parts.append(block.text)
        elif isinstance(block, mt.EmbeddedResource):
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    if parts:
        return "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        import json

        return json.dumps(structured, ensure_ascii=False)
    return ""


class McpTool(Tool):
    """A tool of an MCP server: its schema and description as the server lists them.

    The server validates the arguments. ``annotations`` carries the server's tool
    annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``) as
    :class:`~loopobs.contract.events.ToolAnnotations` (None when the server gives
    none), which the detectors read as they do for local tools.
    """

    def __init__(self, source: McpToolSource, listed: mt.Tool) -> None:
        # Not Tool.__init__: there is no Python function to read a schema from.
        self.source = source
        self.remote_name = listed.name
        self.name = source.spec.tool_name(listed.name)
        self.description = listed.description or ""
        self.timeout = None
        self.parameters = dict(listed.input_schema or {"type": "object"})
        from loopobs.contract.model import ToolDefinition

        self.definition = ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )
        hints = listed.annotations
        self.annotations = (
            ToolAnnotations.from_mcp(hints.model_dump(by_alias=True)) if hints is not None else None
        )

    def __repr__(self) -> str:
        return f"McpTool({self.name!r}, server={self.source.name!r})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as given: the server checks them against its schema."""
        return dict(arguments)

    async def invoke(self, arguments: Mapping[str, Any], *, run_sync: Any = None) -> ToolReturn:
        """Call the tool on its server.

        Raises:
            McpError: the call failed (see the module docs for the kinds).
        """
        return await self.source.call(self, arguments)
