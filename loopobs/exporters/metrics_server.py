"""``start_metrics_server``: serve ``/metrics`` from a registry in a background thread.

The server is prometheus-client's WSGI exposition app on a threading
``wsgiref`` server: it answers in the Prometheus text format, or in
OpenMetrics (with exemplars) when the scraper's ``Accept`` header asks for
``application/openmetrics-text``, and gzips when asked. It binds to
127.0.0.1 unless told otherwise.

In multi-process mode (``PROMETHEUS_MULTIPROC_DIR`` set), leaving ``registry``
out serves a fresh registry with a ``MultiProcessCollector``: the sum over
every worker's files. See ``docs/prometheus.md``.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_wsgi_server
from prometheus_client.multiprocess import MultiProcessCollector

from loopobs.exporters.prometheus import PrometheusObserver, multiprocess_enabled

__all__ = ["MetricsServer", "multiprocess_registry", "start_metrics_server"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


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

    def close(self) -> None:
        """Stop serving, close the listening socket and wait for the thread to end."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
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


def multiprocess_registry(path: str | None = None) -> CollectorRegistry:
    """A fresh registry that sums every worker's values from ``path``.

    Args:
        path: The multi-process directory; ``$PROMETHEUS_MULTIPROC_DIR`` when ``None``.

    Raises:
        ValueError: no directory given and the variable is unset, or it is not a directory.
    """
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def start_metrics_server(
    port: int = 9464,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | PrometheusObserver | None = None,
) -> MetricsServer:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread.

    Args:
        port: TCP port; ``0`` picks a free one (read it from the handle's ``port``).
        addr: Interface to bind; loopback by default.
        registry: A registry (or any collector), or a :class:`PrometheusObserver`
            (its registry is served). Leave it out in multi-process mode to
            serve the sum of all workers.

    Returns:
        The running server; call :meth:`MetricsServer.close` to stop it.

    Raises:
        ValueError: ``registry`` left out outside multi-process mode.
        OSError: the address cannot be bound.
    """
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
    httpd, thread = start_wsgi_server(port, addr=addr, registry=served)
    thread.name = f"loopobs-metrics-{httpd.server_address[1]}"
    return MetricsServer(httpd, thread, served)
