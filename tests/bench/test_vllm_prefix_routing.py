"""bench/vllm_prefix_routing.py's gateway configs: the approximate run has no KV event sources,
the precise run one per vLLM engine keyed by its URL, and both load as gateway settings.
(The benchmark itself needs two vLLM engines: it runs by hand, see docs/bench/README.md.)"""
from __future__ import annotations

from pathlib import Path

from bench import _real_engines as real
from bench import vllm_prefix_routing as bench
from control_plane.settings import load_settings


def engines() -> list[real.RealEngine]:
    return [real.RealEngine("vllm", 8100 + i, None, Path("vllm.log"), {
        "kv_endpoint": f"tcp://127.0.0.1:{8200 + i}",
        "replay_endpoint": f"tcp://127.0.0.1:{8300 + i}"}) for i in range(2)]


def test_precise_config_subscribes_to_each_engine(tmp_path):
    settings = load_settings(bench.write_config(tmp_path, engines(), precise=True))
    routing = settings.gateway.routing
    assert routing.strategy == "prefix_aware" and routing.prefix_precise
    assert {url: (s.endpoint, s.replay_endpoint, s.bind, s.topic)
            for url, s in routing.kv_events.items()} == {
        f"http://127.0.0.1:{8100 + i}/v1": (f"tcp://127.0.0.1:{8200 + i}",
                                            f"tcp://127.0.0.1:{8300 + i}", True, "kv")
        for i in range(2)}


def test_approximate_config_has_no_event_sources(tmp_path):
    settings = load_settings(bench.write_config(tmp_path, engines(), precise=False))
    routing = settings.gateway.routing
    assert routing.strategy == "prefix_aware" and not routing.prefix_precise
    assert routing.kv_events == {}
    assert [b.url for b in settings.models[0].backends] == [e.url for e in engines()]
