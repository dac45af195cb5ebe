"""`inferplane gateway --workers 2`: one scrape of /metrics, whichever worker answers it, shows
the whole gateway (prometheus_client multiprocess mode), over real HTTP in front of the
simulated builtin engine: request counters add up, in-flight gauges are summed over workers,
and the supervisor removes the shared metrics directory when it stops."""
from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.metric_names import Metric
from tests.conftest import free_port, start_process, stop_process, wait_http
from tests.e2e.multi_replica.conftest import MODEL, cli, write_config

WORKERS = 2
REQUESTS = 16
MAX_STREAMS = 16
STREAM_TOKENS = 250   # at 20 ms a token: each stream stays in flight for about 5 s


def _start_slow_engine(port: int, log: Path):
    proc = start_process(["-m", "builtin_engine", "serve", "--simulate", "--port", str(port),
                          "--served-model-name", MODEL, "--sim-decode-base-s", "0.02",
                          "--sim-prefill-s-per-token", "0", "--log-level", "warning"],
                         log_path=log)
    wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
    return proc


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from control_plane.bootstrap import register_models
    from control_plane.settings import load_settings
    from registry.db import make_session_factory

    work = tmp_path_factory.mktemp("worker-metrics")
    engine_port, port = free_port(), free_port()
    config = write_config(work / "inferplane.yaml", f"sqlite:///{work / 'data' / 'ip.db'}",
                          "null", engine_port)
    cli("db", "upgrade", "--config", str(config))
    secret = cli("keys", "create", "--name", "m", "--config",
                 str(config)).strip().splitlines()[-1]
    register_models(make_session_factory(load_settings(config).resolved_database_url()),
                    load_settings(config))
    engine = _start_slow_engine(engine_port, work / "engine.log")
    proc = start_process(["-m", "control_plane", "gateway", "--config", str(config), "--port",
                          str(port), "--workers", str(WORKERS)], log_path=work / "gateway.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=120)
        yield f"http://127.0.0.1:{port}", secret, proc, port
    finally:
        stop_process(proc)
        stop_process(engine)


def _scrape(base: str) -> dict[str, list]:
    """One scrape on a fresh connection: family name -> samples; a family twice fails."""
    text = httpx.get(f"{base}/metrics", timeout=30, trust_env=False).text
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in families, f"{family.name} exposed twice"
        families[family.name] = family.samples
    return families


def _total(samples, name: str, **labels) -> float:
    return sum(s.value for s in samples if s.name == name
               and all(s.labels.get(k) == v for k, v in labels.items()))


async def _chat(base: str, secret: str, max_tokens: int, stream: bool = False,
                started: asyncio.Event | None = None) -> int:
    """One request on a connection of its own (so the kernel spreads them over the workers)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens, "stream": stream}
    headers = {"authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body,
                                 headers=headers) as r:
            async for _ in r.aiter_bytes():
                if started is not None:
                    started.set()
            return r.status_code


def _connections_per_worker(proc, port: int) -> list[int]:
    return [sum(1 for c in w.net_connections("tcp") if c.laddr and c.laddr.port == port
                and c.status == psutil.CONN_ESTABLISHED)
            for w in psutil.Process(proc.pid).children()]


def test_one_scrape_counts_the_requests_of_every_worker(gateway):
    base, secret, proc, _ = gateway
    before = _total(_scrape(base)[Metric.REQUESTS], Metric.REQUESTS.total,
                    model=MODEL, code="200")

    async def fire():
        return await asyncio.gather(*(_chat(base, secret, 2) for _ in range(REQUESTS)))
    workers = psutil.Process(proc.pid).children()
    cpu = [w.cpu_times().user + w.cpu_times().system for w in workers]
    sent = 0
    # The kernel may hand a whole burst of connections to one worker, and CPU time moves in
    # 10 ms ticks: fire again until every worker has visibly served some.
    for _ in range(8):
        assert asyncio.run(fire()) == [200] * REQUESTS
        sent += REQUESTS
        if all(w.cpu_times().user + w.cpu_times().system > c for w, c in zip(workers, cpu)):
            break
    else:
        raise AssertionError("a worker served nothing: the scrape would not show a sum")
    for _ in range(2 * WORKERS):   # several scrapes, several answering workers: the same total
        families = _scrape(base)
        assert _total(families[Metric.REQUESTS], Metric.REQUESTS.total,
                      model=MODEL, code="200") - before == sent
        assert _total(families[Metric.TOKENS], Metric.TOKENS.total, model=MODEL,
                      kind="completion") >= 2 * sent
        assert _total(families[Metric.REQUEST_DURATION],
                      f"{Metric.REQUEST_DURATION}_count", model=MODEL) >= sent
        assert "process_resident_memory_bytes" in families   # the answering worker's own


async def _hold_streams_on_every_worker(base: str, secret: str, proc, port: int):
    """Open streams two at a time until every worker holds one (the kernel may hand a burst of
    connections to one worker); scrape while all are in flight. Returns (open streams, connections
    per worker, the scrape, status codes once they have finished)."""
    streams, per_worker = [], [0]
    while len(streams) < MAX_STREAMS and not all(per_worker):
        started = [asyncio.Event() for _ in range(2)]
        streams += [asyncio.create_task(_chat(base, secret, STREAM_TOKENS, True, e))
                    for e in started]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 30)
        per_worker = await asyncio.to_thread(_connections_per_worker, proc, port)
    during = await asyncio.to_thread(_scrape, base)
    return len(streams), per_worker, during, await asyncio.gather(*streams)


def test_inflight_gauges_are_summed_over_workers(gateway):
    base, secret, proc, port = gateway
    held, per_worker, during, codes = asyncio.run(
        _hold_streams_on_every_worker(base, secret, proc, port))
    assert codes == [200] * held
    assert sum(per_worker) == held and all(per_worker), per_worker   # spread over both
    assert _total(during[Metric.INFLIGHT_REQUESTS], Metric.INFLIGHT_REQUESTS,
                  model=MODEL) == held
    assert _total(during[Metric.EVENT_LOOP_TASKS], Metric.EVENT_LOOP_TASKS) > 0
    after = _scrape(base)
    assert _total(after[Metric.INFLIGHT_REQUESTS], Metric.INFLIGHT_REQUESTS,
                  model=MODEL) == 0


def test_stopping_removes_the_shared_metrics_directory(gateway):
    _, _, proc, _ = gateway
    workers = psutil.Process(proc.pid).children()
    # The workers keep their metric files open (the variable was set after exec: not in environ).
    files = [Path(f.path) for w in workers for f in w.open_files()
             if Path(f.path).name.startswith("counter_")]
    assert {f.name for f in files} == {f"counter_{w.pid}.db" for w in workers}, files
    metrics_dir = files[0].parent
    assert metrics_dir.name.startswith("inferplane-metrics-")
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not metrics_dir.exists()
