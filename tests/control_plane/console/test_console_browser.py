"""The console in a real browser (Playwright driving chromium) against `inferplane up` with the
real model: everything by clicking and typing, screenshots of every page in test-artifacts/.

An admin prices the model, creates a team and a key, copies the secret; the key's owner signs
in, sees only the playground and chats there; the admin finds the request under Requests and
its spend under Usage, starts a canary against a failing candidate and watches it roll back,
then revokes the key. An operator sees no Keys or Teams page and the API refuses it keys."""
from __future__ import annotations

import re
import threading

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import free_port, running_up, start_process, stop_process, wait_http
from tests.e2e.rollouts.stack import simulated_engine_args

MODEL = "smollm2-135m-instruct"
EMBEDDING = "all-minilm-l6-v2"
CANARY = "canary-demo"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("console")
    sim, flaky = free_port(), free_port()
    engines = [start_process(simulated_engine_args(sim, "sim"), log_path=work / "sim.log"),
               start_process(["-m", "tests.e2e.rollouts.flaky_engine", "--port", str(flaky),
                              "--name", "flaky", "--fail-ratio", "0.5"],
                             log_path=work / "flaky.log")]
    config = {"engine_port_base": free_port(), "rollout_tick_s": 0.25,
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 4}},
                         # listed, sorting first, never chatted with (the Playground)
                         {"name": EMBEDDING, "task": "embedding",
                          "backends": [{"url": f"http://127.0.0.1:{sim}/v1"}]}]}
    try:
        for port, proc in zip((sim, flaky), engines):
            wait_http(f"http://127.0.0.1:{port}/v1/models", proc, timeout=120)
        with running_up(work, config) as (base, key, _proc):
            admin = httpx.Client(base_url=base + "/admin/v1", timeout=30,
                                 headers={"Authorization": f"Bearer {key}"})
            yield {"base": base, "key": key, "admin": admin, "state": {}, "engines": {
                "sim": f"http://127.0.0.1:{sim}/v1", "flaky": f"http://127.0.0.1:{flaky}/v1"}}
    finally:
        for proc in engines:
            stop_process(proc)


def shot(page: Page, artifacts, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def sign_in(page: Page, base: str, key: str) -> None:
    page.goto(base + "/console")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()


def open_page(page: Page, label: str) -> None:
    page.get_by_role("navigation").get_by_role("link", name=label, exact=True).click()
    expect(page.get_by_role("heading", level=1, name=label)).to_be_visible()


def nav_labels(page: Page) -> list[str]:
    return page.get_by_role("navigation").get_by_role("link").all_inner_texts()


def test_console_is_served_with_a_strict_csp_and_no_secrets(stack):
    r = httpx.get(stack["base"] + "/console")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>" not in r.text and stack["key"] not in r.text
    vendored = httpx.get(stack["base"] + "/console/static/vendor/preact-htm.module.js")
    assert vendored.status_code == 200 and "content-security-policy" in vendored.headers


def test_admin_creates_team_and_key_and_copies_the_secret(stack, page: Page, artifacts):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Refused to" in m.text else None)  # CSP
    sign_in(page, stack["base"], stack["key"])
    assert nav_labels(page) == ["Overview", "Keys", "Teams", "Models", "Rollouts", "Usage",
                                "Requests", "Guardrails", "Playground", "Audit log"]
    shot(page, artifacts, "01-overview")

    open_page(page, "Models")
    page.get_by_role("button", name=MODEL).click()
    prices = page.get_by_role("form", name="Prices")
    prices.get_by_label("USD per 1k prompt tokens").fill("0.5")
    prices.get_by_label("USD per 1k completion tokens").fill("2")
    prices.get_by_role("button", name="Save prices").click()
    model_row = page.get_by_role("table", name="Models").locator("tbody tr").filter(has_text=MODEL)
    expect(model_row.locator("td[data-col=price_out_per_1k]")).to_have_text("2")
    backends = page.get_by_role("table", name="Backends")
    expect(backends.locator("td[data-col=model]").first).to_have_text(MODEL)
    expect(backends.locator("td[data-col=breaker]").first).to_have_text("closed")
    expect(backends.locator("td[data-col=kv_usage]").first).to_have_text(re.compile(r"\d+%"))
    shot(page, artifacts, "02-models")

    open_page(page, "Teams")
    form = page.get_by_role("form", name="Create team")
    form.get_by_label("Team name").fill("research")
    form.get_by_label("Budget (USD)").fill("5")
    form.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("table", name="Teams")).to_contain_text("research")
    shot(page, artifacts, "03-teams")

    open_page(page, "Keys")
    page.get_by_role("button", name="New key").click()
    form = page.get_by_role("form", name="Create key")
    form.get_by_label("Name").fill("alice")
    form.get_by_label("Team").select_option("research")
    form.get_by_label("Budget (USD)").fill("1")
    form.get_by_role("button", name="Create key").click()
    secret = page.get_by_test_id("secret").inner_text()
    assert secret.startswith("ip-")
    page.get_by_role("button", name="Copy", exact=True).click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    shot(page, artifacts, "04-keys-secret-once")
    page.get_by_role("button", name="Done").click()
    expect(page.get_by_test_id("secret")).to_have_count(0)
    assert secret not in page.content()  # shown once, then gone from the page
    row = page.get_by_role("row").filter(has_text="alice")
    expect(row).to_contain_text("research")
    stack["state"].update(secret=secret, key_id=int(row.locator("td").first.inner_text()))
    assert not errors, errors


def test_the_key_owner_sees_only_the_playground_and_chats(stack, page: Page, artifacts):
    sign_in(page, stack["base"], stack["state"]["secret"])
    assert nav_labels(page) == ["Playground"]
    page.goto(stack["base"] + "/console#/keys")  # a typed URL still lands on what it may use
    expect(page.get_by_role("heading", level=1)).to_have_text("Playground")
    # a chat model is preselected; the embedding model (first by name) is only listed apart
    expect(page.get_by_label("Model")).to_have_value(MODEL)
    assert EMBEDDING not in page.get_by_label("Model").locator("option").all_inner_texts()
    expect(page.get_by_test_id("embedding-models")).to_contain_text(EMBEDDING)
    page.get_by_label("Message").fill("What is the capital of France?")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_test_id("stats")).to_contain_text("completion tokens", timeout=60_000)
    assert page.get_by_test_id("answer").inner_text().strip()
    assert re.search(r"latency \d+ ms · TTFT \d+ ms", page.get_by_test_id("stats").inner_text())
    shot(page, artifacts, "05-playground")
    sign_out(page)
    assert page.evaluate("sessionStorage.length") == 0


def test_admin_sees_the_request_and_its_spend(stack, page: Page, artifacts):
    key_id = stack["state"]["key_id"]
    sign_in(page, stack["base"], stack["key"])
    open_page(page, "Requests")
    rows = page.get_by_role("table", name="Recent requests").locator("tbody tr")
    mine = rows.filter(has=page.locator(f"td[data-col=key_id]:text-is('{key_id}')"))
    for _ in range(20):  # usage is written in batches, about every half second
        if mine.count():
            break
        page.wait_for_timeout(500)
        page.get_by_role("button", name="Refresh").click()
    expect(mine.first).to_contain_text(MODEL)
    expect(mine.first.locator("td[data-col=status]")).to_have_text("ok (200)")
    shot(page, artifacts, "06-requests")

    open_page(page, "Usage")
    page.get_by_label("Group by").select_option("key")
    page.get_by_role("button", name="Show").click()
    usage = page.get_by_role("table", name="Usage by key")
    row = usage.locator("tbody tr").filter(
        has=page.locator(f"td[data-col=key_id]:text-is('{key_id}')"))
    expect(row.locator("td[data-col=requests]")).to_have_text("1")
    assert float(row.locator("td[data-col=cost]").inner_text()) > 0
    expect(row.locator("td[data-col=hit_rate]")).to_have_text("0.0%")   # nothing cached
    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV", exact=True).click()
    csv = open(download.value.path()).read().splitlines()
    assert csv[0] == "key_id,requests,errors,prompt_tokens,completion_tokens,cost,cache_hits"
    assert any(line.startswith(f"{key_id},1,0,") for line in csv[1:])
    shot(page, artifacts, "07-usage")
    # A refused query shows the API's message and no stale rows from the previous answer.
    page.get_by_label("From").fill("2026-12-31")
    page.get_by_label("To (exclusive)").fill("2026-01-01")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("alert")).to_contain_text("since must be before until")
    expect(page.get_by_role("table", name="Usage by key")).to_have_count(0)

    open_page(page, "Overview")
    expect(page.locator(".stat-value").first).not_to_have_text("0")  # requests in 14 days
    expect(page.get_by_label("Requests and errors per hour (24 hours)")).to_be_visible()
    shot(page, artifacts, "01-overview")


def test_operator_registers_a_model_with_two_versions_and_their_backends(stack, page: Page):
    """canary-demo: v1 on a healthy engine, v2 on one that fails half its requests."""
    sign_in(page, stack["base"], stack["key"])
    open_page(page, "Models")
    new = page.get_by_role("form", name="New model")
    new.get_by_label("Model name").fill(CANARY)
    new.get_by_role("button", name="New model").click()
    expect(page.get_by_role("heading", name=CANARY)).to_be_visible()
    for label in ("v1", "v2"):
        form = page.get_by_role("form", name="Add version")
        form.get_by_label("Version").fill(label)
        form.get_by_role("button", name="Add version").click()
        expect(page.get_by_role("table", name="Versions")).to_contain_text(label)
    alias = page.get_by_role("form", name="Point alias")
    alias.get_by_label("Alias version").select_option("v1")
    alias.get_by_role("button", name="Point alias").click()
    expect(page.get_by_role("table", name="Aliases")).to_contain_text("default")
    for version, engine in (("v1", "sim"), ("v2", "flaky")):
        form = page.get_by_role("form", name="Add backend")
        form.get_by_label("Backend URL").fill(stack["engines"][engine])
        form.get_by_label("Served model name").fill(engine)
        form.get_by_label("Version").select_option(version)
        form.get_by_label("State").select_option("ready")
        form.get_by_role("button", name="Add backend").click()
        expect(page.get_by_role("table", name="Backends")).to_contain_text(stack["engines"][engine])
    assert stack["admin"].get(f"/models/{CANARY}/aliases/default").json()["version"] == "v1"


def test_canary_against_a_failing_candidate_rolls_back(stack, page: Page, artifacts):
    stop = threading.Event()
    traffic = threading.Thread(target=send_until, args=(stack, stop), daemon=True)
    traffic.start()
    try:
        sign_in(page, stack["base"], stack["key"])
        open_page(page, "Rollouts")
        page.get_by_role("button", name="New rollout").click()
        form = page.get_by_role("form", name="Start a rollout")
        form.get_by_label("Model").select_option(CANARY)
        form.get_by_label("Candidate version").fill("v2")
        form.get_by_label("Steps").fill("0.5:30")
        form.get_by_label("Analysis interval (s)").fill("1")
        form.get_by_label("Minimum requests").fill("4")
        form.get_by_label("Max error rate").fill("0.1")
        form.get_by_role("button", name="Start rollout").click()
        expect(page.get_by_test_id("rollout-state")).to_have_text("rolled_back", timeout=60_000)
        expect(page.get_by_role("table", name="Measurements")).to_contain_text("fail")
        expect(page.locator("figure.chart")).to_have_count(3)  # error rate, p95 latency, TTFT
        shot(page, artifacts, "08-rollouts")
    finally:
        stop.set()
        traffic.join(30)
    alias = stack["admin"].get(f"/models/{CANARY}/aliases/default").json()
    assert alias["version"] == "v1"


def test_operator_pauses_resumes_and_aborts_a_rollout(stack, page: Page, artifacts):
    sign_in(page, stack["base"], stack["key"])
    open_page(page, "Rollouts")
    page.get_by_role("button", name="New rollout").click()
    form = page.get_by_role("form", name="Start a rollout")
    form.get_by_label("Model").select_option(CANARY)
    form.get_by_label("Candidate version").fill("v2")
    form.get_by_label("Steps").fill("0.2:3600")
    form.get_by_label("Max error rate").fill("")  # no limits: steps advance on time alone
    form.get_by_role("button", name="Start rollout").click()
    state = page.get_by_test_id("rollout-state")
    expect(state).to_have_text("progressing", timeout=30_000)
    for action, phase in (("Pause", "paused"), ("Resume", "progressing")):
        page.get_by_role("button", name=action, exact=True).click()
        expect(state).to_have_text(phase)
    page.get_by_role("button", name="Abort", exact=True).click()
    page.get_by_role("button", name="Confirm abort").click()
    expect(state).to_have_text("rolled_back", timeout=30_000)
    events = page.get_by_role("table", name="Rollout events")
    for kind in ("paused", "progressing", "aborting", "rolled_back"):
        expect(events).to_contain_text(kind)


def chat_status(stack, secret: str) -> int:
    return httpx.post(stack["base"] + "/v1/chat/completions", headers={
        "Authorization": f"Bearer {secret}"}, json={"model": MODEL, "messages": []}).status_code


def send_until(stack, stop: threading.Event) -> None:
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {stack['key']}"}) as c:
        while not stop.is_set():
            c.post(stack["base"] + "/v1/chat/completions", json={
                "model": CANARY, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
            stop.wait(0.03)


def test_admin_revokes_the_key_and_finds_it_in_the_audit_log(stack, page: Page, artifacts):
    secret = stack["state"]["secret"]
    sign_in(page, stack["base"], stack["key"])
    open_page(page, "Keys")
    row = page.get_by_role("row").filter(has_text="alice")
    row.get_by_role("button", name="Edit").click()
    form = page.get_by_role("form", name="Save key")
    form.get_by_label("Requests / min").fill("30")
    form.get_by_role("button", name="Save key").click()
    expect(row.locator("td[data-col=limits]")).to_contain_text("30 rpm")
    row.get_by_role("button", name="Rotate").click()
    row.get_by_role("button", name="Confirm rotate").click()
    rotated = page.get_by_test_id("secret").inner_text()
    assert rotated.startswith("ip-") and rotated != secret
    page.get_by_role("button", name="Done").click()
    assert chat_status(stack, secret) == 401  # the old secret stops working at once
    secret = rotated
    row.get_by_role("button", name="Revoke").click()
    row.get_by_role("button", name="Confirm revoke").click()
    expect(page.get_by_role("row").filter(has_text="alice")).to_have_count(0)
    assert chat_status(stack, secret) == 401
    open_page(page, "Audit log")
    page.get_by_label("Action").fill("revoke")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("table", name="Audit log").locator("tbody tr")).to_have_count(1)
    shot(page, artifacts, "09-audit")


def test_an_operator_sees_no_key_pages_and_cannot_create_keys(stack, page: Page, artifacts):
    made = stack["admin"].post("/keys", json={"name": "ops", "role": "operator"}).json()
    sign_in(page, stack["base"], made["secret"])
    labels = nav_labels(page)
    assert "Keys" not in labels and "Teams" not in labels and "Rollouts" in labels
    status = page.evaluate("""async () => (await fetch('/admin/v1/keys', {method: 'POST',
        headers: {Authorization: 'Bearer ' + sessionStorage.getItem('inferplane-key'),
                  'Content-Type': 'application/json'}, body: '{"name": "x"}'})).status""")
    assert status == 403
    shot(page, artifacts, "10-operator-overview")
