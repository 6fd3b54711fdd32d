"""``start_metrics_server``: serve ``/metrics`` from a registry in a background thread.

The server answers ``GET`` and ``HEAD /metrics`` with prometheus-client's
exposition: the Prometheus text format, or OpenMetrics (with exemplars) when
the scraper's ``Accept`` header asks for ``application/openmetrics-text``,
gzipped when asked. Any other path is 404. It binds to 127.0.0.1 unless told
otherwise.

Connections are bounded: each gets ``idle_timeout_s`` per read (an idle or
trickling client is dropped), at most ``max_connections`` are served at once
(a new one past the cap evicts the oldest, so idle sockets cannot lock a
scraper out), and :meth:`MetricsServer.close` drops every open connection:
nothing accepted before it is answered after it.

In multi-process mode (``PROMETHEUS_MULTIPROC_DIR`` set), leaving ``registry``
out serves a fresh registry with a collector summing every worker's files;
a damaged file is skipped, named once in a log line and counted in
``loopobs_multiprocess_damaged_files``. See ``docs/prometheus.md``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from loopobs.exporters import catalog as c
from loopobs.exporters.prometheus import PrometheusObserver, multiprocess_enabled

__all__ = ["MetricsServer", "multiprocess_registry", "start_metrics_server"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
METRICS_PATH = "/metrics"
DEFAULT_MAX_CONNECTIONS = 32
DEFAULT_IDLE_TIMEOUT_S = 10.0
"""Prometheus's default scrape timeout: a scraper never leaves a connection idle longer."""

_logger = logging.getLogger("loopobs")

_WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _routes(app: _WsgiApp) -> _WsgiApp:
    """``app`` on ``/metrics`` for GET and HEAD (no body); 404 elsewhere, 405 for other methods."""

    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: the metrics are at {METRICS_PATH}\n".encode()]
        method = environ.get("REQUEST_METHOD")
        if method == "HEAD":
            body = b"".join(app({**environ, "REQUEST_METHOD": "GET"}, start_response))
            del body  # the headers (Content-Length included) are those of the GET
            return []
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"only GET and HEAD\n"]
        return app(environ, start_response)

    return route


class _Handler(WSGIRequestHandler):
    """A silent handler that reads nothing for a server that is closing."""

    server: _BoundedServer

    def handle(self) -> None:
        if self.server.closing:
            return
        # An idle or vanished client: nothing to answer.
        with contextlib.suppress(TimeoutError, ConnectionError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most ``max_connections`` of them, each read bounded."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        *,
        max_connections: int,
        idle_timeout_s: float,
    ) -> None:
        self.address_family = family
        self.closing = False
        self.idle_timeout_s = idle_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: dict[socket.socket, None] = {}  # insertion order: oldest first
        self._open_lock = threading.Lock()
        self.evicted = 0
        super().__init__(address, _Handler)

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        with self._open_lock:
            return len(self._open)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._evict_oldest()
            if not self._slots.acquire(timeout=1.0):
                self.shutdown_request(request)
                return
        request.settimeout(self.idle_timeout_s)
        with self._open_lock:
            refused = self.closing
            if not refused:
                self._open[request] = None
        if refused:
            self._slots.release()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._open_lock:
            known = self._open.pop(request, "gone") is None
        if known:
            self._slots.release()

    def _evict_oldest(self) -> None:
        with self._open_lock:
            oldest = next(iter(self._open), None)
        if oldest is not None:
            self.evicted += 1
            _hang_up(oldest)

    def drop_connections(self) -> None:
        """Refuse what comes next and hang up every open connection."""
        with self._open_lock:
            self.closing = True
            current = list(self._open)
        for sock in current:
            _hang_up(sock)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that misbehaves ends its own connection; the server carries on quietly."""


def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already gone
        sock.shutdown(socket.SHUT_RDWR)


class MetricsServer:
    """A running ``/metrics`` server: its bound ``port`` and ``url``, and :meth:`close`.

    Usable as a context manager; closing twice is harmless.
    """

    def __init__(self, httpd: Any, thread: threading.Thread, registry: Any) -> None:
        self._httpd = httpd
        self._thread = thread
        self.registry = registry
        """The collector being served."""
        host, port = httpd.server_address[:2]
        self.addr: str = host
        self.port: int = port
        self._closed = False

    @property
    def url(self) -> str:
        """The ``/metrics`` URL (IPv6 hosts in brackets)."""
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    @property
    def open_connections(self) -> int:
        """Connections being served right now (at most ``max_connections``)."""
        return int(self._httpd.open_connections)

    def close(self) -> None:
        """Stop serving: close the listening socket, hang up every open connection, join.

        A connection accepted before this call gets no answer after it.
        """
        if self._closed:
            return
        self._closed = True
        self._httpd.closing = True
        self._httpd.shutdown()
        self._httpd.drop_connections()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<MetricsServer {self.url} {state}>"


class _TolerantMultiProcessCollector(MultiProcessCollector):
    """Sums the workers' files, skipping (and naming, once) any file it cannot read.

    A damaged file would otherwise fail every scrape with an error naming no
    file. The number skipped at this scrape is the gauge
    ``loopobs_multiprocess_damaged_files``.
    """

    def __init__(self, registry: CollectorRegistry | None, path: str | None = None) -> None:
        self._reported: set[str] = set()
        self._reported_lock = threading.Lock()
        super().__init__(registry, path=path)  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[Any]:
        """The merged metrics of every readable file, then the damaged-file gauge."""
        readable: list[str] = []
        damaged: list[str] = []
        for path in sorted(glob.glob(os.path.join(self._path, "*.db"))):
            try:
                values = MmapedDict.read_all_values_from_file(path)  # type: ignore[no-untyped-call]
                for key, _value, _timestamp, _pos in values:
                    json.loads(key)
            except FileNotFoundError:
                continue  # removed since the listing (mark_process_dead)
            except Exception as exc:
                damaged.append(path)
                self._report(path, exc)
            else:
                readable.append(path)
        yield from self.merge(readable, accumulate=True)  # type: ignore[no-untyped-call]
        gauge = GaugeMetricFamily(
            c.MULTIPROCESS_DAMAGED_FILES,
            "Multi-process files skipped at this scrape because they could not be read.",
        )
        gauge.add_metric([], len(damaged))
        yield gauge

    def _report(self, path: str, exc: Exception) -> None:
        with self._reported_lock:
            if path in self._reported:
                return
            self._reported.add(path)
        _logger.warning(
            "loopobs /metrics: skipping damaged multi-process file %s (%s: %s); "
            "its worker's values are missing until it is removed",
            path,
            type(exc).__name__,
            exc,
        )


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A fresh registry that sums every worker's values from ``path``.

    A file that cannot be read is skipped, named once in a warning and counted
    in ``loopobs_multiprocess_damaged_files``; the other workers' sums are served.

    Args:
        path: The multi-process directory; ``$PROMETHEUS_MULTIPROC_DIR`` when ``None``.

    Raises:
        ValueError: no directory given and the variable is unset, or it is not a directory.
    """
    registry = CollectorRegistry()
    _TolerantMultiProcessCollector(registry, path=path)
    return registry


def start_metrics_server(
    port: int = 9464,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | PrometheusObserver | None = None,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
) -> MetricsServer:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread.

    Args:
        port: TCP port; ``0`` picks a free one (read it from the handle's ``port``).
        addr: Interface to bind; loopback by default.
        registry: A registry (or any collector), or a :class:`PrometheusObserver`
            (its registry is served). Leave it out in multi-process mode to
            serve the sum of all workers.
        max_connections: Connections served at once (one thread each); a new one
            past the cap hangs up the oldest.
        idle_timeout_s: How long a read on a connection may wait.

    Returns:
        The running server; call :meth:`MetricsServer.close` to stop it.

    Raises:
        ValueError: ``registry`` left out outside multi-process mode, or a bound
            that is not positive.
        OSError: the address cannot be bound.
    """
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    if not idle_timeout_s > 0:
        raise ValueError("idle_timeout_s must be a positive number of seconds")
    served: Any
    if isinstance(registry, PrometheusObserver):
        served = registry.registry
    elif registry is not None:
        served = registry
    elif os.environ.get(MULTIPROC_ENV) or multiprocess_enabled():
        served = multiprocess_registry()
    else:
        raise ValueError(
            "start_metrics_server needs the registry to serve (e.g. PrometheusObserver.registry),"
            f" unless {MULTIPROC_ENV} is set"
        )
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    httpd = _BoundedServer(
        (str(sockaddr[0]), port),
        family,
        max_connections=max_connections,
        idle_timeout_s=idle_timeout_s,
    )
    httpd.set_app(_routes(make_wsgi_app(served)))
    thread = threading.Thread(
        target=httpd.serve_forever, daemon=True, name=f"loopobs-metrics-{httpd.server_address[1]}"
    )
    thread.start()
    return MetricsServer(httpd, thread, served)
