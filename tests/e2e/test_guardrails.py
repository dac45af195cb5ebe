"""Guardrails end to end: `inferplane up` with a policy from the YAML file on a model served
by an echo engine (an OpenAI-compatible server answering with the prompt), another policy
made through the admin API and bound to one key; masking both ways, a block, the official
openai SDK reading a masked stream, bodies stored redacted and shown to admins only, and the
actions counted in /metrics."""
from __future__ import annotations

import threading
import time

import httpx
import pytest
import uvicorn
from openai import OpenAI

from tests.conftest import free_port, running_up
from tests.gateway.guardrails.conftest import EchoServer

MODEL = "guarded"
SPEC = {"pii": {"email": "mask", "phone": "mask", "card": "block"}, "body_log": "full"}


@pytest.fixture(scope="module")
def echo():
    server = EchoServer()
    uv = uvicorn.Server(uvicorn.Config(server.app(), host="127.0.0.1", port=server.port,
                                       log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.02)
    yield server
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, echo):
    work = tmp_path_factory.mktemp("guardrails-up")
    config = {"engine_port_base": free_port(),
              "models": [{"name": MODEL, "engine": "openai",
                          "backends": [{"url": echo.url, "served_model": "echo"}]}],
              "guardrails": {"policies": {"strict": SPEC}, "models": {MODEL: "strict"},
                             "body_retention_days": 2}}
    with running_up(work, config) as (base, admin_key, _proc):
        admin = httpx.Client(base_url=base, timeout=30, trust_env=False,
                             headers={"Authorization": f"Bearer {admin_key}"})
        user = _ok(admin.post("/admin/v1/keys", json={"name": "someone"}))
        _wait_served(base, user["secret"])
        yield {"base": base, "admin": admin, "user": user}
        admin.close()


def _ok(resp: httpx.Response) -> dict:
    assert resp.status_code in (200, 201), resp.text
    return resp.json()


def _wait_served(base: str, secret: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {secret}"})
        if r.status_code == 200 and MODEL in {m["id"] for m in r.json()["data"]}:
            return
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)


def ask(stack, content: str, secret: str | None = None) -> httpx.Response:
    return httpx.post(f"{stack['base']}/v1/chat/completions", timeout=30, headers={
        "Authorization": f"Bearer {secret or stack['user']['secret']}"}, json={
        "model": MODEL, "messages": [{"role": "user", "content": content}]})


def test_yaml_policy_masks_both_ways_and_blocks(stack, echo):
    r = ask(stack, "mail bob@example.com or call +1 650-253-0000")
    assert r.status_code == 200, r.text
    assert echo.bodies[-1]["messages"][0]["content"] == "mail [EMAIL] or call [PHONE]"
    assert r.json()["choices"][0]["message"]["content"] == "mail [EMAIL] or call [PHONE]"
    blocked = ask(stack, "card 4111 1111 1111 1111")
    assert blocked.status_code == 400
    assert blocked.json()["error"]["code"] == "guardrail_blocked" and "4111" not in blocked.text


def test_stream_read_by_the_openai_sdk(stack):
    client = OpenAI(base_url=stack["base"] + "/v1", api_key=stack["user"]["secret"],
                    max_retries=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, stream=True, messages=[{"role": "user", "content":
                                             "write to ann.lee@example.org soon"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "write to [EMAIL] soon"


def test_admin_policy_bound_to_a_key(stack):
    admin = stack["admin"]
    _ok(admin.post("/admin/v1/guardrails/policies", json={
        "name": "no-falcon", "spec": {"banned_terms": ["falcon"]}}))
    other = _ok(admin.post("/admin/v1/keys", json={"name": "falcon-free"}))
    _ok(admin.put("/admin/v1/guardrails/bindings", json={"policy": "no-falcon",
                                                         "key_id": other["id"]}))
    deadline = time.monotonic() + 30
    while ask(stack, "about falcon", other["secret"]).status_code != 400:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert ask(stack, "about falcon").status_code == 200       # the model's policy: no ban
    audit = admin.get("/admin/v1/audit", params={"resource_type": "guardrail_binding"}).json()
    assert audit["data"][0]["action"] == "bind"


def test_bodies_stored_redacted_for_admins_only(stack):
    r = ask(stack, "I am carol@example.net")
    request_id = r.headers["x-request-id"]
    admin = stack["admin"]
    deadline = time.monotonic() + 30
    while (bodies := admin.get(f"/admin/v1/requests/{request_id}/bodies")).status_code != 200:
        assert time.monotonic() < deadline, bodies.text
        time.sleep(0.3)
    row = bodies.json()["data"][0]
    assert row["mode"] == "full" and row["policy"] == "strict"
    assert "carol@" not in row["request_body"] and "[EMAIL]" in row["request_body"]
    assert row["response_body"] == "I am [EMAIL]"
    denied = httpx.get(f"{stack['base']}/admin/v1/requests/{request_id}/bodies",
                       headers={"Authorization": f"Bearer {stack['user']['secret']}"})
    assert denied.status_code == 403


def test_actions_in_metrics(stack):
    text = httpx.get(f"{stack['base']}/metrics").text
    lines = [line for line in text.splitlines()
             if line.startswith("inferplane_guardrail_actions_total{")
             and f'model="{MODEL}"' in line and 'rule="email"' in line
             and 'direction="input"' in line]
    assert lines and float(lines[0].split()[-1]) >= 1
