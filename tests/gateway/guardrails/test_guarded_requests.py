"""Guardrails on a running gateway (real HTTP, an echo engine that answers with the prompt):
the prompt masked before the engine sees it, a block answered 400 in OpenAI's shape, the
answer masked (JSON and streamed, the stream read back by the official openai SDK), the
moderation hook, and nothing changed where no policy applies."""
from __future__ import annotations

from dataclasses import replace

import openai
import orjson
import pytest

from common.guardrail_spec import PiiKind
from tests.gateway.conftest import KEYS
from tests.gateway.guardrails.conftest import echo_model, use_policy

ALL_MASK = {"pii": {k.value: "mask" for k in PiiKind}}
LEAKY = ("Reach me at bob.smith@example.com or +1 650-253-0000; card 4111 1111 1111 1111, "
         "IBAN DE89 3704 0044 0532 0130 00, server 10.20.30.40, key AKIAIOSFODNN7EXAMPLE.")
MASKED = ("Reach me at [EMAIL] or [PHONE]; card [CARD], IBAN [IBAN], server [IP], "
          "key [SECRET].")


def chat(gw, content: str, model: str = "m", key: str = "user", **extra):
    with gw.client(key) as c:
        return c.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": content}], **extra})


def sdk(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=KEYS["user"], max_retries=0)


def metric(gw, rule: str, action: str, direction: str) -> float:
    with gw.client(None) as c:
        text = c.get("/metrics").text
    prefix = (f'inferplane_guardrail_actions_total{{action="{action}",direction="{direction}",'
              f'model="m",rule="{rule}"}} ')
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_no_policy_passes_untouched(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    r = chat(gw, LEAKY)
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == LEAKY
    assert echo.bodies[-1]["messages"][0]["content"] == LEAKY


def test_prompt_masked_before_the_engine(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {**ALL_MASK, "directions": ["input"]})
    r = chat(gw, LEAKY)
    assert r.status_code == 200
    assert echo.bodies[-1]["messages"][0]["content"] == MASKED
    assert metric(gw, "email", "mask", "input") == 1


def test_text_parts_and_completion_prompts_masked(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {**ALL_MASK, "directions": ["input"]})
    parts = [{"type": "text", "text": "mail bob@example.com"}]
    with gw.client() as c:
        assert c.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": parts}]}).status_code == 200
        assert echo.bodies[-1]["messages"][0]["content"][0]["text"] == "mail [EMAIL]"
        assert c.post("/v1/completions", json={
            "model": "m", "prompt": "mail bob@example.com"}).status_code == 200
        assert echo.bodies[-1]["prompt"] == "mail [EMAIL]"


def test_block_is_a_400_naming_the_rule_not_the_text(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"card": "block", "email": "mask"}})
    r = chat(gw, "my card is 4111 1111 1111 1111")
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "guardrail_blocked" and error["type"] == "invalid_request_error"
    assert "'card'" in error["message"] and "'p'" in error["message"]
    assert "4111" not in r.text
    assert echo.bodies == []
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).chat.completions.create(model="m", messages=[
            {"role": "user", "content": "card 4111 1111 1111 1111"}])
    assert info.value.code == "guardrail_blocked"
    assert metric(gw, "card", "block", "input") == 2


def test_banned_terms_regexes_and_prompt_size(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"banned_terms": ["project falcon"], "max_prompt_chars": 100,
                    "regexes": [{"name": "ticket", "pattern": r"TCK-\d+", "action": "mask"}]})
    assert "banned_term" in chat(gw, "tell me about Project Falcon").json()["error"]["message"]
    too_long = chat(gw, "x" * 101)
    assert too_long.status_code == 400 and "max_prompt_chars" in too_long.json()["error"][
        "message"]
    assert chat(gw, "see TCK-42").json()["choices"][0]["message"]["content"] == "see [TICKET]"


def test_log_action_counts_and_passes(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "log"}})
    r = chat(gw, "mail bob@example.com")
    assert r.json()["choices"][0]["message"]["content"] == "mail bob@example.com"
    assert metric(gw, "email", "log", "input") == 1
    assert metric(gw, "email", "log", "output") == 1


def test_answer_masked(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {**ALL_MASK, "directions": ["output"]})
    r = chat(gw, LEAKY)
    assert echo.bodies[-1]["messages"][0]["content"] == LEAKY    # the prompt went as it was
    assert r.json()["choices"][0]["message"]["content"] == MASKED
    assert metric(gw, "iban", "mask", "output") == 1


@pytest.mark.parametrize("usage", [False, True])
def test_streamed_answer_masked_across_chunks(make_gateway, echo, usage):
    """The echo engine sends 3 characters a chunk: every entity straddles chunks."""
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {**ALL_MASK, "directions": ["output"]})
    extra = {"stream_options": {"include_usage": True}} if usage else {}
    chunks = list(sdk(gw).chat.completions.create(
        model="m", messages=[{"role": "user", "content": LEAKY}], stream=True, **extra))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == MASKED
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (chunks[-1].usage is not None) == usage


def test_streamed_raw_events_stay_valid(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {**ALL_MASK, "directions": ["output"]})
    with gw.client() as c, c.stream("POST", "/v1/completions", json={
            "model": "m", "prompt": LEAKY, "stream": True}) as r:
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    texts = [orjson.loads(e[len("data: "):]) for e in events[:-1]]
    assert "".join(t["choices"][0]["text"] for t in texts if t["choices"]) == MASKED


def test_streamed_block_ends_with_content_filter(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"card": "block"}, "directions": ["output"]})
    chunks = list(sdk(gw).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "ok then " * 20 +
                              "card 4111 1111 1111 1111 and more text after it"}],
        stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "4111" not in text and "more text" not in text
    assert chunks[-1].choices[0].finish_reason == "content_filter"


def test_key_policy_wins_over_model_policy(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    user_key = next(k for k in gw.source.current.keys.values() if k.name == "user")
    use_policy(gw, {"pii": {"email": "block"}}, models=(), keys={user_key.key_id: "p"})
    assert chat(gw, "bob@example.com").status_code == 400
    assert chat(gw, "bob@example.com", key="admin").status_code == 200


class TestModeration:
    def spec(self, echo, on_error: str, timeout: float = 0.5) -> dict:
        return {"moderation": {"url": f"{echo.url}/moderations", "timeout_s": timeout,
                               "on_error": on_error}}

    def test_flagged_blocks(self, make_gateway, echo):
        gw = make_gateway([echo_model(echo)])
        use_policy(gw, self.spec(echo, "fail_open"))
        assert chat(gw, "hello").status_code == 200
        r = chat(gw, "please FLAG this")
        assert r.status_code == 400 and "moderation" in r.json()["error"]["message"]
        assert "violence" in r.json()["error"]["message"]
        assert echo.moderations[-1] == {"input": ["please FLAG this"]}

    @pytest.mark.parametrize("trouble", ["SLOW", "BROKEN"])
    def test_failure_fail_open_passes(self, make_gateway, echo, trouble):
        gw = make_gateway([echo_model(echo)])
        use_policy(gw, self.spec(echo, "fail_open"))
        r = chat(gw, f"{trouble} hello")
        assert r.status_code == 200
        assert metric(gw, "moderation", "fail_open", "input") == 1

    def test_timeout_fail_closed_is_503(self, make_gateway, echo):
        gw = make_gateway([echo_model(echo)])
        use_policy(gw, self.spec(echo, "fail_closed"))
        r = chat(gw, "SLOW hello")
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "guardrail_unavailable"
        assert echo.bodies == []

    def test_unreachable_fail_closed_is_503(self, make_gateway, echo):
        gw = make_gateway([echo_model(echo)])
        use_policy(gw, {"moderation": {"url": "http://127.0.0.1:9/v1/moderations",
                                       "on_error": "fail_closed"}})
        assert chat(gw, "hello").status_code == 503


def test_json_answer_blocked_is_withheld_with_content_filter(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"secret": "block"}, "directions": ["output"]})
    r = chat(gw, "the key is AKIAIOSFODNN7EXAMPLE")
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "" and choice["finish_reason"] == "content_filter"
    assert metric(gw, "secret", "block", "output") == 1


def test_a_policy_that_does_not_validate_refuses_rather_than_skips(make_gateway, echo):
    gw = make_gateway([echo_model(echo)])
    use_policy(gw, {"pii": {"email": "mask"}})
    view = gw.source.current.guardrails
    broken = {"p": replace(view.policies["p"], revision=9, spec={"pii": {"mail": "mask"}})}
    gw.source.current = replace(gw.source.current, guardrails=replace(view, policies=broken))
    r = chat(gw, "hello")
    assert r.status_code == 503 and r.json()["error"]["code"] == "guardrail_unavailable"
    assert echo.bodies == []
