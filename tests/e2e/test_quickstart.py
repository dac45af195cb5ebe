"""The embedded quickstart end to end: `inferplane up` with the real model, real HTTP, the
official openai client, and every OpenAI error case of the request path."""
from __future__ import annotations

import signal
import stat
import time

import httpx
import pytest
from openai import OpenAI

from tests.conftest import free_port, running_up

MODEL = "smollm2-135m-instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("up")
    engine_port = free_port()
    config = {"engine_port_base": engine_port,
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 8}},
                         {"name": "offline-model", "engine": "openai",
                          "backends": [{"url": f"http://127.0.0.1:{free_port()}/v1"}]}]}
    with running_up(work, config) as (base, key, proc):
        yield {"proc": proc, "base": base, "key": key, "work": work, "engine_port": engine_port}


@pytest.fixture(scope="module")
def client(stack) -> OpenAI:
    return OpenAI(base_url=stack["base"] + "/v1", api_key=stack["key"], max_retries=0)


def test_admin_key_written_once_with_private_mode(stack):
    key_file = stack["work"] / ".inferplane" / "admin.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stack["key"] in (stack["work"] / "up.log").read_text()


def test_openai_client_answers_paris_streamed_and_not(client):
    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                           max_tokens=32)
    text = reply.choices[0].message.content
    assert "Paris" in text
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                            max_tokens=32, stream=True,
                                            stream_options={"include_usage": True})
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) == text
    assert usage is not None and usage.completion_tokens == reply.usage.completion_tokens


def test_continue_final_message_extends_a_partial_answer(client):
    """vLLM's continuation extension: greedy text cut anywhere and continued is the same text
    (what a gateway resuming a broken stream relies on)."""
    args = dict(model=MODEL, temperature=0)
    whole = client.chat.completions.create(messages=QUESTION, max_tokens=16, **args)
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        messages=QUESTION, max_tokens=16, stream=True, **args) if c.choices]
    partial = "".join(pieces[:5])
    rest = client.chat.completions.create(
        messages=QUESTION + [{"role": "assistant", "content": partial}], max_tokens=11,
        extra_body={"continue_final_message": True, "add_generation_prompt": False}, **args)
    assert partial and partial + rest.choices[0].message.content == \
        whole.choices[0].message.content
    with pytest.raises(Exception) as refused:  # the engine's 400, relayed
        client.chat.completions.create(messages=QUESTION, max_tokens=4, extra_body={
            "continue_final_message": True, "add_generation_prompt": False}, **args)
    assert "final assistant message" in str(refused.value)


def test_logprobs_and_echo_in_openai_shapes(client):
    chat = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                          max_tokens=5, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert "".join(c.token for c in content) == chat.choices[0].message.content
    assert len(content) == chat.usage.completion_tokens
    for c in content:  # greedy: the chosen token is the most likely one
        assert c.logprob <= 0 and len(c.top_logprobs) == 3
        assert c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob == c.logprob
    pieces = [c.choices[0].logprobs.content for c in client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=5, logprobs=True,
        stream=True) if c.choices and c.choices[0].logprobs]
    streamed = [entry for piece in pieces for entry in piece]
    assert [e.token for e in streamed] == [c.token for c in content]
    done = client.completions.create(model=MODEL, prompt="The capital of France is",
                                     max_tokens=4, temperature=0, logprobs=2, echo=False)
    lp = done.choices[0].logprobs
    assert "".join(lp.tokens) == done.choices[0].text and len(lp.top_logprobs[0]) == 2
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    echoed = client.completions.create(model=MODEL, prompt="The capital of France is",
                                       max_tokens=4, temperature=0, echo=True)
    assert echoed.choices[0].text == "The capital of France is" + done.choices[0].text


def test_completions_and_models(client):
    models = [m.id for m in client.models.list().data]
    assert MODEL in models
    done = client.completions.create(model=MODEL, prompt="The capital of France is",
                                     max_tokens=5, temperature=0)
    assert done.choices[0].text and done.usage.completion_tokens <= 5


def test_seeded_sampling_is_reproducible(client):
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a word."}],
                  temperature=1.0, seed=1234, max_tokens=12)
    first = client.chat.completions.create(**kwargs).choices[0].message.content
    second = client.chat.completions.create(**kwargs).choices[0].message.content
    assert first == second


def _post(stack, path, body=None, key="admin", raw=None):
    headers = {"Content-Type": "application/json"}
    if key == "admin":
        headers["Authorization"] = f"Bearer {stack['key']}"
    elif key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(stack["base"] + path, json=body, content=raw, headers=headers, timeout=60)


def _assert_openai_error(resp, status):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"]
    return err


CHAT = "/v1/chat/completions"


@pytest.mark.parametrize("key", [None, "ip-not-a-real-key"])
def test_bad_or_missing_key_is_401(stack, key):
    _assert_openai_error(_post(stack, CHAT, {"model": MODEL, "messages": QUESTION}, key=key), 401)


def test_unknown_model_is_404(stack):
    _assert_openai_error(_post(stack, CHAT, {"model": "no-such-model", "messages": QUESTION}), 404)


@pytest.mark.parametrize("body,raw", [
    (None, b'{"model": "smollm2-135m-instruct", "messages": ['),  # malformed JSON
    ({"model": MODEL}, None),  # missing messages
    ({"model": MODEL, "messages": "hello"}, None),  # wrong type
    ({"model": MODEL, "messages": QUESTION, "temperature": "hot"}, None),
    ({"model": MODEL, "messages": QUESTION, "max_tokens": 10**7}, None),  # beyond context
    ({"model": MODEL, "messages": QUESTION, "n": 2}, None),
])
def test_invalid_body_is_400(stack, body, raw):
    _assert_openai_error(_post(stack, CHAT, body, raw=raw), 400)


def test_completions_invalid_body_is_400(stack):
    _assert_openai_error(_post(stack, "/v1/completions", {"model": MODEL}), 400)


def test_no_ready_backend_is_503(stack):
    """Nothing listens at the configured backend: it is registered ready and gets a 502 until
    its health probes count `failures_to_down` misses; from then on every request is a 503."""
    body = {"model": "offline-model", "messages": QUESTION}
    deadline = time.monotonic() + 30
    while (resp := _post(stack, CHAT, body)).status_code == 502 and time.monotonic() < deadline:
        assert resp.json()["error"]["code"] == "connect", resp.text
        time.sleep(0.5)
    assert _assert_openai_error(resp, 503)["code"] == "no_ready_backend"


def test_health_endpoints(stack):
    assert httpx.get(stack["base"] + "/healthz").status_code == 200
    assert httpx.get(stack["base"] + "/readyz").status_code == 200


def test_stop_string_cuts_the_text_streamed_and_not(client):
    full = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                          max_tokens=32).choices[0].message.content
    cut = full.index("Paris")
    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                           max_tokens=32, stop=["Paris"])
    assert reply.choices[0].message.content == full[:cut]
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                            max_tokens=32, stop=["Paris"], stream=True)
    text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
    assert text == full[:cut]


def test_max_completion_tokens_limits_output(client):
    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                           max_completion_tokens=3)
    assert reply.usage.completion_tokens <= 3 and reply.choices[0].finish_reason == "length"


# Runs last: it stops the shared stack.
def test_ctrl_c_stops_everything(stack):
    proc = stack["proc"]
    engine_health = f"http://127.0.0.1:{stack['engine_port']}/health"
    assert httpx.get(engine_health, timeout=5).status_code == 200
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(engine_health, timeout=1)
        except httpx.HTTPError:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the engine process outlived `inferplane up`")
