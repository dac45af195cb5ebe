"""Per-backend load as the router sees it: the gateway's own in-flight count (exact, updated by
the relay) plus the engine's last reported queue and KV usage (polled)."""
from __future__ import annotations

from engine_adapter.base import LoadView

_EMPTY = LoadView()


class LoadBook:
    def __init__(self) -> None:
        self.inflight: dict[str, int] = {}
        self.engine: dict[str, LoadView] = {}

    def acquire(self, backend_id: str) -> None:
        self.inflight[backend_id] = self.inflight.get(backend_id, 0) + 1

    def release(self, backend_id: str) -> None:
        self.inflight[backend_id] = max(0, self.inflight.get(backend_id, 0) - 1)

    def report(self, backend_id: str, view: LoadView) -> None:
        self.engine[backend_id] = view

    def engine_view(self, backend_id: str) -> LoadView:
        return self.engine.get(backend_id, _EMPTY)

    def load(self, backend_id: str) -> float:
        """Comparable load: in-flight + engine queue, and a full KV cache counts as a long queue
        (a backend near KV exhaustion preempts, so new work there is slow)."""
        view = self.engine.get(backend_id, _EMPTY)
        return self.inflight.get(backend_id, 0) + view.waiting + 8.0 * max(0.0, view.kv_usage - 0.8)
