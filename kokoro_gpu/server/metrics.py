"""Prometheus metrics of one server (its own registry, so that several apps can live in one process)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("kokoro_requests", "HTTP requests by route and status",
                                ("route", "status"), registry=r)
        self.queue_depth = Gauge("kokoro_queue_depth", "Chunks waiting for the model", registry=r)
        self.active_streams = Gauge("kokoro_active_streams", "Speech responses in progress", registry=r)
        self.batch_size = Histogram("kokoro_batch_size", "Chunks per model call", buckets=_BATCH_BUCKETS,
                                    registry=r)
        self.batch_seconds = Histogram("kokoro_batch_seconds", "Seconds per model call",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.time_to_first_audio = Histogram("kokoro_time_to_first_audio_seconds",
                                             "From request received to its first audio bytes ready",
                                             buckets=_LATENCY_BUCKETS, registry=r)
        self.audio_seconds = Counter("kokoro_audio_seconds", "Seconds of audio synthesised", registry=r)
        self.g2p_seconds = Histogram("kokoro_g2p_seconds", "Text front-end seconds per piece of text",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        self.first_chunk_seconds = Histogram("kokoro_first_chunk_seconds",
                                             "Seconds from a request's first chunk queued to its audio",
                                             buckets=_LATENCY_BUCKETS, registry=r)
        self.chunk_wait_seconds = Histogram("kokoro_chunk_wait_seconds",
                                            "Seconds a chunk waited for the model (queued to started)",
                                            buckets=_LATENCY_BUCKETS, registry=r)
        self._phase_runs = _PhaseRunsCollector()
        r.register(self._phase_runs)

    def count_phase_runs(self, source: Callable[[], dict[str, int] | None]) -> None:
        """Report the engine's phase runs (``Backend.phase_runs``) at each scrape."""
        self._phase_runs.source = source

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)


class _PhaseRunsCollector(Collector):
    """``kokoro_engine_phase_runs_total{run}``: the engine's forward-pass phases by how they ran (from a
    captured graph, captured then, or eager: a length seen for the first time), read at scrape time."""

    def __init__(self) -> None:
        self.source: Callable[[], dict[str, int] | None] = lambda: None  # until the model is loaded

    def collect(self) -> Iterator[CounterMetricFamily]:
        runs = self.source()
        if runs is None:  # a backend without graphs (the CPU's)
            return
        family = CounterMetricFamily("kokoro_engine_phase_runs", "Engine forward-pass phases by how they ran",
                                     labels=("run",))
        for run, count in sorted(runs.items()):
            family.add_metric((run,), count)
        yield family


Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class RequestCounter:
    """ASGI middleware counting HTTP responses by route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                route = scope.get("route")
                path = getattr(route, "path", "unmatched")
                self.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
