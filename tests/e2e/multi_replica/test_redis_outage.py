"""A replica whose Redis is unreachable keeps serving under its fail mode (fail_open, the
default: admit without accounting) and does not crash, hang or log every request."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import free_port, stop_process
from tests.e2e.multi_replica.conftest import MODEL, start_gateway, write_config
from tests.e2e.multi_replica.test_shared_limits import body

REQUESTS = 20


@pytest.fixture(params=["fail_open"])
def outage_gateway(request, deployment, postgres_url, tmp_path):
    closed_port = free_port()   # nothing listens here: every Redis call is refused at once
    config = write_config(tmp_path / "outage.yaml", postgres_url,
                          f"redis://127.0.0.1:{closed_port}/0", deployment.engine_port,
                          fail_mode=request.param)
    port = free_port()
    log = tmp_path / "gateway.log"
    proc = start_gateway(config, port, log)
    try:
        yield f"http://127.0.0.1:{port}", proc, log
    finally:
        stop_process(proc)


def test_unreachable_redis_fails_open_without_crashing(deployment, outage_gateway):
    base, proc, log = outage_gateway
    headers = {"authorization": f"Bearer {deployment.secret}"}
    with httpx.Client(timeout=30, trust_env=False, headers=headers) as client:
        started = time.monotonic()
        statuses = [client.post(f"{base}/v1/completions", json=body(i)).status_code
                    for i in range(REQUESTS)]
        elapsed = time.monotonic() - started
        # Admitted although this key's shared window is full: there is no counter to consult.
        assert statuses == [200] * REQUESTS
        assert elapsed < REQUESTS * 1.0, elapsed     # a refused connect costs ms, not a timeout
        r = client.post(f"{base}/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        assert client.get(f"{base}/healthz").status_code == 200
    assert proc.poll() is None
    text = log.read_text()
    assert "Traceback" not in text
    # The outage is logged once per store, not once per request.
    assert 1 <= text.count("Redis unavailable") <= 2, text[-2000:]


@pytest.mark.parametrize("outage_gateway", ["fail_closed"], indirect=True)
def test_unreachable_redis_fails_closed_with_503(deployment, outage_gateway):
    base, proc, _ = outage_gateway
    headers = {"authorization": f"Bearer {deployment.secret}"}
    with httpx.Client(timeout=30, trust_env=False, headers=headers) as client:
        responses = [client.post(f"{base}/v1/completions", json=body(i)) for i in range(3)]
        assert client.get(f"{base}/healthz").status_code == 200
    assert [r.status_code for r in responses] == [503] * 3
    assert all(r.json()["error"]["message"] for r in responses)
    assert proc.poll() is None
