"""Cold tier through the whole stack: no engine until the first request, the request is held
while the control plane starts one, and the engine is stopped again when the model idles."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import free_port, running_up

MODEL = "cold-sim"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    engine_args = {"simulate": True, "sim_decode_base_s": 0.001, "num_blocks": 128}
    config = {"engine_port_base": free_port(), "tiers": {"idle_s": 3.0, "tick_s": 0.5},
              "models": [{"name": MODEL, "model": "smollm2-135m-instruct", "tier": "cold",
                          "engine_args": engine_args}]}
    with running_up(tmp_path_factory.mktemp("cold"), config, ready_path="/healthz") as (base, key, _):
        yield {"base": base, "headers": {"Authorization": f"Bearer {key}"}}


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
