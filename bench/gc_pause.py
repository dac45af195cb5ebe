"""How long one full garbage collection stops the gateway, with and without gc_freeze.

    python bench/gc_pause.py

Builds the gateway app as `inferplane up` does (everything it imports, routes, metrics), then
times full collections (best of 5) before and after `gc.freeze()`, which the gateway calls
once started (setting `gc_freeze`, on by default). A full collection walks every tracked
object; under load one runs every few seconds, and its pause lands on whatever requests are
in flight, so it shows up directly in P99 latency.
"""
from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def full_collection_ms(repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        gc.collect(2)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    import control_plane.up  # noqa: F401  (what `inferplane up` loads besides the gateway)
    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings
    from registry.snapshot import RoutingSnapshot

    class Source:
        current = RoutingSnapshot.empty()

    create_gateway_app(GatewaySettings(), Source())
    gc.collect()
    tracked = len(gc.get_objects())
    before = full_collection_ms()
    gc.freeze()
    after = full_collection_ms()
    print(f"tracked objects after start-up: {tracked}")
    ratio = f"{before / after:.0f}x shorter" if after >= 0.01 else "below timer noise"
    print(f"full collection pause: {before:.1f} ms without gc_freeze, {after:.3f} ms with it "
          f"({ratio})")


if __name__ == "__main__":
    main()
