"""Graceful drain on SIGTERM, as Kubernetes stops a gateway pod (deploy/kubernetes relies on
it): a stream in flight finishes, new connections are refused, the process exits 0 in time."""
from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.conftest import free_port, running_up, start_process, stop_process, wait_http

MODEL = "slow"


@pytest.fixture
def slow_engine(tmp_path):
    port = free_port()
    proc = start_process(["-m", "tests.e2e.rollouts.flaky_engine", "--port", str(port),
                          "--name", MODEL, "--fail-ratio", "0"], log_path=tmp_path / "engine.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def test_sigterm_lets_the_stream_in_flight_finish(tmp_path, slow_engine):
    config = {"models": [{"name": MODEL, "engine": "openai",
                          "backends": [{"url": f"{slow_engine}/v1"}]}]}
    with running_up(tmp_path, config) as (base, key, proc):
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": MODEL, "max_tokens": 6, "stream": True,
                "messages": [{"role": "user", "content": "hi"}]}
        deadline = time.monotonic() + 30
        while httpx.post(f"{base}/v1/chat/completions", headers=headers,
                         json={**body, "stream": False}).status_code != 200:
            assert time.monotonic() < deadline, "the backend never became ready"
            time.sleep(0.5)
        httpx.post(f"{slow_engine}/control", json={"token_delay": 0.5}).raise_for_status()
        lines, started = [], threading.Event()

        def stream() -> None:
            with httpx.stream("POST", f"{base}/v1/chat/completions", headers=headers, json=body,
                              timeout=30) as response:
                for line in response.iter_lines():
                    started.set()
                    lines.append(line)

        reader = threading.Thread(target=stream)
        reader.start()
        assert started.wait(10)
        proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/healthz", timeout=2)
        reader.join(15)
        assert proc.wait(15) == 0
        assert time.monotonic() - stopped_at < 15
    events = [line for line in lines if line]  # SSE events are separated by blank lines
    assert events[-1] == "data: [DONE]"
    assert sum(line.startswith("data: {") for line in events) >= 6
