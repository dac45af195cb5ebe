"""Cold tier through the whole stack: no engine until the first request, the request is held
while the control plane starts one, and the engine is stopped again when the model idles."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from tests.conftest import free_port, wait_http

MODEL = "cold-sim"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("cold")
    port = free_port()
    engine_args = {"simulate": True, "sim_decode_base_s": 0.001, "num_blocks": 128}
    config = {"engine_port_base": free_port(), "tiers": {"idle_s": 3.0, "tick_s": 0.5},
              "models": [{"name": MODEL, "model": "smollm2-135m-instruct", "tier": "cold",
                          "engine_args": engine_args}]}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    up = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                           str(work / "config.yaml"), "--port", str(port)], cwd=work,
                          stdout=open(work / "up.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", up, timeout=120)
        key = (work / ".inferplane" / "admin.key").read_text().strip()
        yield {"base": f"http://127.0.0.1:{port}", "headers": {"Authorization": f"Bearer {key}"}}
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()


def backends(stack) -> list[dict]:
    resp = httpx.get(stack["base"] + "/admin/v1/backends", headers=stack["headers"],
                     params={"model": MODEL})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    return body["data"] if isinstance(body, dict) else body


def test_first_request_starts_the_engine_then_idle_stops_it(stack):
    assert backends(stack) == []
    started = time.monotonic()
    resp = httpx.post(stack["base"] + "/v1/chat/completions", headers=stack["headers"],
                      timeout=120, json={"model": MODEL, "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "wake up"}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] >= 1
    assert time.monotonic() - started < 120
    assert [b["state"] for b in backends(stack)] == ["ready"]
    deadline = time.monotonic() + 30
    while backends(stack) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert backends(stack) == [], "the idle cold engine was not stopped"
