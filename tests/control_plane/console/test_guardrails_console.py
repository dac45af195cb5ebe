"""The Guardrails page and a request's bodies in a real browser (Playwright driving chromium)
against `inferplane up` with an echo engine: an admin writes a policy, binds it to the model,
a request's email is masked, and the admin opens that request's bodies under Requests; an
operator sees the policies but no editing forms and no bodies."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import uvicorn
from playwright.sync_api import Page, expect

from tests.conftest import free_port, running_up
from tests.control_plane.console.test_console_browser import open_page, shot, sign_in
from tests.gateway.guardrails.conftest import EchoServer

MODEL = "echo-chat"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    echo = EchoServer()
    uv = uvicorn.Server(uvicorn.Config(echo.app(), host="127.0.0.1", port=echo.port,
                                       log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    work = tmp_path_factory.mktemp("guardrails-console")
    config = {"engine_port_base": free_port(),
              "models": [{"name": MODEL, "engine": "openai",
                          "backends": [{"url": echo.url, "served_model": "echo"}]}]}
    try:
        with running_up(work, config) as (base, key, _proc):
            admin = httpx.Client(base_url=base + "/admin/v1", timeout=30,
                                 headers={"Authorization": f"Bearer {key}"})
            yield {"base": base, "key": key, "admin": admin}
    finally:
        uv.should_exit = True
        thread.join(timeout=10)


def test_admin_edits_policies_and_reads_bodies(stack, page: Page, artifacts):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Refused to" in m.text else None)
    sign_in(page, stack["base"], stack["key"])
    open_page(page, "Guardrails")
    expect(page.get_by_text("No guardrail policies")).to_be_visible()
    form = page.get_by_role("form", name="Create policy")
    form.get_by_label("Policy name").fill("pii")
    form.get_by_label("Spec (JSON)").fill("{not json")
    form.get_by_role("button", name="Create policy").click()
    expect(form.get_by_role("alert")).to_contain_text("not JSON")
    form.get_by_label("Spec (JSON)").fill(json.dumps({"pii": {"emails": "mask"}}))
    form.get_by_role("button", name="Create policy").click()
    expect(form.get_by_role("alert")).to_contain_text("emails")      # the API names the key
    form.get_by_label("Spec (JSON)").fill(json.dumps({"pii": {"email": "mask"},
                                                      "body_log": "full"}))
    form.get_by_role("button", name="Create policy").click()
    policies = page.get_by_role("table", name="Guardrail policies")
    expect(policies).to_contain_text("email: mask")

    binding = page.get_by_role("form", name="Bind a policy")
    binding.get_by_label("Model name or key id").fill(MODEL)
    binding.get_by_role("button", name="Bind").click()
    expect(page.get_by_role("table", name="Guardrail bindings")).to_contain_text(MODEL)
    expect(policies).to_contain_text(MODEL)
    shot(page, artifacts, "20-guardrails")

    secret = stack["admin"].post("/keys", json={"name": "writer"}).json()["secret"]
    deadline = time.monotonic() + 30
    while True:
        r = httpx.post(f"{stack['base']}/v1/chat/completions", timeout=30,
                       headers={"Authorization": f"Bearer {secret}"},
                       json={"model": MODEL, "messages": [
                           {"role": "user", "content": "I am dana@example.com"}]})
        if r.status_code == 200 and "[EMAIL]" in r.text:
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.3)
    request_id = r.headers["x-request-id"]
    while stack["admin"].get(f"/requests/{request_id}/bodies").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.3)

    open_page(page, "Requests")
    page.get_by_role("button", name=f"Bodies of request {request_id}").click()
    bodies = page.get_by_role("region", name="Request bodies")
    expect(bodies.get_by_test_id("response")).to_have_text("I am [EMAIL]")
    expect(bodies.get_by_test_id("request")).to_contain_text("[EMAIL]")
    expect(bodies).not_to_contain_text("dana@")
    shot(page, artifacts, "21-request-bodies")
    assert errors == []


def test_operator_reads_policies_without_forms_or_bodies(stack, page: Page):
    made = stack["admin"].post("/keys", json={"name": "ops-g", "role": "operator"}).json()
    sign_in(page, stack["base"], made["secret"])
    open_page(page, "Guardrails")
    expect(page.get_by_role("table", name="Guardrail policies")).to_be_visible()
    expect(page.get_by_role("form", name="Create policy")).to_have_count(0)
    open_page(page, "Requests")
    expect(page.get_by_role("table", name="Recent requests")).to_be_visible()
    expect(page.get_by_role("button", name="Bodies", exact=False)).to_have_count(0)
