"""POST /v1/embeddings through `inferplane up` and the real all-minilm-l6-v2 engine: the official
openai SDK, keys, limits on input tokens, budgets, usage records, spend and metrics."""
from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from openai import OpenAI

from common.metric_names import Metric
from control_plane.settings import Settings
from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import metric_sum, samples

MODEL = "all-minilm-l6-v2"
PRICE_IN = 0.5  # USD per 1k input tokens: large, so small requests show in spend
TEXTS = ["The cat sat on the mat.", "A feline rested on the rug.", "Stock prices fell sharply."]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("embed-up")
    config = {"engine_port_base": free_port(),
              "models": [{"name": MODEL, "price_in_per_1k": PRICE_IN, "price_out_per_1k": 9.0}]}
    with running_up(work, config) as (base, key, _proc):
        yield base, key


def _post(stack, body: dict, key: str | None = None) -> httpx.Response:
    base, admin = stack
    return httpx.post(f"{base}/v1/embeddings", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {key or admin}"})


def _key(stack, **fields) -> tuple[str, int]:
    base, admin = stack
    created = httpx.post(f"{base}/admin/v1/keys", headers={"Authorization": f"Bearer {admin}"},
                         json={"name": f"embed-{time.monotonic_ns()}", **fields}, timeout=10)
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    deadline = time.monotonic() + 10  # the gateway picks the key up with the next snapshot
    while _post(stack, {"model": "-", "input": "x"}, secret).status_code == 401:
        assert time.monotonic() < deadline, "the new key never reached the gateway"
        time.sleep(0.2)
    return secret, created.json()["id"]


def _requests_log(stack, key_id: int, rows: int) -> list[dict]:
    base, admin = stack
    deadline = time.monotonic() + 20  # the usage writer flushes in batches
    while True:
        data = httpx.get(f"{base}/admin/v1/requests", params={"model": MODEL, "limit": 500},
                         headers={"Authorization": f"Bearer {admin}"}, timeout=10).json()["data"]
        mine = [r for r in data if r.get("key_id") == key_id]
        if len(mine) >= rows or time.monotonic() > deadline:
            return mine
        time.sleep(0.3)


def test_default_settings_serve_embeddings_beside_chat():
    names = [m.name for m in Settings().models]
    assert names[0] == "smollm2-135m-instruct" and MODEL in names


def test_openai_sdk_embeddings_create(stack):
    base, key = stack
    client = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    reply = client.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64
    vectors = np.array([d.embedding for d in reply.data])
    assert vectors.shape == (3, 384) and reply.model == MODEL
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > len(TEXTS) * 2
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > unrelated + 0.2
    floats = client.embeddings.create(model=MODEL, input=TEXTS[0], encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0], atol=1e-6)
    with pytest.raises(Exception) as refused:  # the engine's 400, relayed
        client.embeddings.create(model=MODEL, input="x", dimensions=64)
    assert getattr(refused.value, "status_code", None) == 400


def test_keys(stack):
    assert _post(stack, {"model": MODEL, "input": "x"}, key="ip-not-a-key").status_code == 401
    other, _ = _key(stack, models=["smollm2-135m-instruct"])
    refused = _post(stack, {"model": MODEL, "input": "x"}, other)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


def test_tpm_limit_counts_input_tokens(stack):
    key, _ = _key(stack, tpm_limit=40)
    assert _post(stack, {"model": MODEL, "input": "short"}, key).status_code == 200
    too_many = _post(stack, {"model": MODEL, "input": [[101] * 200]}, key)
    assert too_many.status_code == 429
    assert too_many.json()["error"]["type"] == "rate_limit_error"


def test_budget_refuses_once_spent(stack):
    key, _ = _key(stack, max_budget=0.002)  # 4 tokens at 0.5 $/1k
    refused = None
    for _ in range(20):
        reply = _post(stack, {"model": MODEL, "input": [[101] * 10]}, key)
        if reply.status_code != 200:
            refused = reply
            break
    assert refused is not None and refused.status_code == 429
    assert refused.json()["error"]["code"] == "budget_exceeded"


def test_usage_records_spend_and_metrics(stack):
    base, _ = stack
    key, key_id = _key(stack)
    before = samples(httpx.get(f"{base}/metrics", timeout=10).text)
    replies = [_post(stack, {"model": MODEL, "input": TEXTS[:n]}, key) for n in (1, 2, 3)]
    assert all(r.status_code == 200 for r in replies)
    tokens = [r.json()["usage"]["prompt_tokens"] for r in replies]
    rows = _requests_log(stack, key_id, 3)
    assert sorted(r["prompt_tokens"] for r in rows) == sorted(tokens)
    assert all(r["completion_tokens"] == 0 and r["http_status"] == 200 for r in rows)
    assert sum(r["cost"] for r in rows) == pytest.approx(sum(tokens) * PRICE_IN / 1000)
    spend = httpx.get(f"{base}/admin/v1/keys/{key_id}", timeout=10,
                      headers={"Authorization": f"Bearer {stack[1]}"}).json()["spend"]
    assert float(spend) == pytest.approx(sum(tokens) * PRICE_IN / 1000)
    after = samples(httpx.get(f"{base}/metrics", timeout=10).text)

    def delta(name: str, **labels) -> float:
        return metric_sum(after, name, model=MODEL, **labels) - metric_sum(before, name,
                                                                           model=MODEL, **labels)

    assert delta(Metric.REQUESTS.total, code="200") >= 3
    assert delta(Metric.TOKENS.total) >= sum(tokens)


@pytest.mark.parametrize("body, status, code", [
    ({"model": MODEL, "input": []}, 400, None),
    ({"model": MODEL, "input": ""}, 400, None),
    ({"model": MODEL, "input": 3}, 400, None),
    ({"model": MODEL}, 400, None),
    ({"model": MODEL, "input": "x", "encoding_format": "int8"}, 400, None),
    ({"model": MODEL, "input": "word " * 300}, 400, "context_length_exceeded"),
    # one token-id list is one input, however long: the engine's context bounds it
    ({"model": MODEL, "input": [101] * 3000}, 400, "context_length_exceeded"),
    ({"model": MODEL, "input": ["x"] * 2049}, 400, None),
    ({"model": "no-such-model", "input": "x"}, 404, "model_not_found"),
])
def test_bad_requests_in_openai_shape(stack, body, status, code):
    reply = _post(stack, body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["message"] and (code is None or error["code"] == code)


def test_chat_on_an_embedding_model_is_a_clear_400(stack):
    base, key = stack
    reply = httpx.post(f"{base}/v1/chat/completions", timeout=30,
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 400 and "does not support" in reply.json()["error"]["message"]
