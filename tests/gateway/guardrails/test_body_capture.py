"""What a request leaves for the body log: nothing by default; with `metadata` sizes and
findings only; with `full` both bodies, PII masked even where the policy only logs it, and
truncated to the policy's bound."""
from __future__ import annotations

import time

import openai

from tests.gateway.conftest import KEYS
from tests.gateway.guardrails.conftest import echo_model, use_policy


def records_of(gw) -> list:
    records: list = []
    gw.state.usage_sinks.append(records.append)
    return records


def wait_for(records: list, n: int = 1) -> None:
    deadline = time.monotonic() + 5
    while len(records) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def ask(gw, content: str, stream: bool = False) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEYS["user"], max_retries=0)
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], stream=stream)
    if stream:
        list(answer)


def test_off_by_default(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "log"}})
    records = records_of(gw)
    ask(gw, "bob@example.com")
    wait_for(records)
    assert records[0].bodies is None


def test_metadata_has_no_text(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "log"}, "body_log": "metadata"})
    records = records_of(gw)
    ask(gw, "mail bob@example.com")
    wait_for(records)
    bodies = records[0].bodies
    assert bodies.mode == "metadata" and bodies.request_body is None
    assert bodies.response_body is None and bodies.request_chars == len("mail bob@example.com")
    assert {"rule": "email", "action": "log", "direction": "input", "count": 1} in \
        bodies.findings


def test_full_bodies_redacted_even_when_the_action_is_log(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "log"}, "body_log": "full"})
    records = records_of(gw)
    for stream in (False, True):
        ask(gw, "mail bob@example.com, key AKIAIOSFODNN7EXAMPLE", stream=stream)
    wait_for(records, 2)
    for record in records:
        bodies = record.bodies
        assert "bob@example.com" not in bodies.request_body
        assert "[EMAIL]" in bodies.request_body and "[SECRET]" in bodies.request_body
        assert bodies.response_body == "mail [EMAIL], key [SECRET]"
        assert not bodies.request_truncated and not bodies.response_truncated
    assert echo.bodies[-1]["messages"][0]["content"].startswith("mail bob@")   # log: passed


def test_full_bodies_truncated(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"body_log": "full", "body_max_chars": 64})
    records = records_of(gw)
    ask(gw, "word " * 100, stream=True)
    wait_for(records)
    bodies = records[0].bodies
    assert len(bodies.request_body) == 64 and bodies.request_truncated
    assert len(bodies.response_body) == 64 and bodies.response_truncated
    assert bodies.response_chars == 500


def test_long_bodies_bounded_and_still_redacted(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"body_log": "full", "body_max_chars": 64})
    records = records_of(gw)
    # long bodies are cut (with a margin) before they are scanned; the email sits in the margin
    ask(gw, "x" * 4140 + " bob.lee@example.com " + "y" * 6000)
    wait_for(records)
    bodies = records[0].bodies
    assert bodies.request_truncated and len(bodies.request_body) <= 64
    assert bodies.response_truncated and len(bodies.response_body) <= 64
    assert "bob" not in bodies.request_body + bodies.response_body


def test_one_audit_line_names_rules_not_text(make_gateway, echo, caplog):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "log", "card": "block"}})
    with caplog.at_level("INFO", logger="inferplane.gateway.guardrails"):
        ask(gw, "mail bob@example.com")
        try:
            ask(gw, "card 4111 1111 1111 1111")
        except openai.BadRequestError:
            pass
        deadline = time.monotonic() + 5
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records]
    assert "guardrail policy 'p': blocked; card block input x1" in lines
    assert any(line.startswith("guardrail policy 'p': passed; email log input x1") for line in lines)
    assert not any("bob@" in line or "4111" in line for line in lines)
