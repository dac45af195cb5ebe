"""`inferplane engine serve --model all-minilm-l6-v2` over real HTTP: OpenAI's embeddings shape,
parity with sentence-transformers, batching under concurrency, and bad input as clear 400s."""
from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import pytest

from tests.conftest import free_port, start_process, stop_process, wait_http

MODEL = "all-minilm-l6-v2"
# Fixed text set: short and long, punctuation, accents, CJK, emoji, numbers, repeated words.
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "émigré naïve café — 東京 🚀",
    "Embeddings map text to vectors so that similar meanings land close together.",
    "3.14159 is approximately pi, and e is about 2.71828",
    "buffalo buffalo buffalo buffalo buffalo buffalo buffalo buffalo",
    "How do I reset my password if I no longer have access to my email account?",
    "  leading and trailing spaces  ",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("embed") / "engine.log"
    proc = start_process(["-m", "builtin_engine", "serve", "--model", MODEL, "--port", str(port)],
                         log_path=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers' own vectors for TEXTS, from the same packaged model."""
    from sentence_transformers import SentenceTransformer

    from builtin_engine.embeddings.model import embedding_model_dir

    model = SentenceTransformer(str(embedding_model_dir(MODEL)), device="cpu")
    return model.encode(TEXTS, convert_to_numpy=True)


def _post(engine: str, body: dict) -> httpx.Response:
    return httpx.post(f"{engine}/v1/embeddings", json=body, timeout=60)


def _vectors(reply: dict) -> np.ndarray:
    return np.array([d["embedding"] for d in sorted(reply["data"], key=lambda d: d["index"])])


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_parity_with_sentence_transformers(engine, reference):
    reply = _post(engine, {"model": MODEL, "input": TEXTS})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "list" and body["model"] == MODEL
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    ours = _vectors(body)
    assert ours.shape == (len(TEXTS), 384)
    cosine = _cosine(ours, reference)
    assert cosine.min() >= 0.9999, cosine
    # 2_Normalize: unit vectors
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_one_text_alone_equals_it_in_a_padded_batch(engine, reference):
    alone = _vectors(_post(engine, {"input": TEXTS[2]}).json())[0]
    assert _cosine(alone[None], reference[2:3])[0] >= 0.9999


def test_usage_counts_the_special_tokens(engine):
    from tokenizers import Tokenizer

    from builtin_engine.embeddings.model import embedding_model_dir

    tok = Tokenizer.from_file(str(embedding_model_dir(MODEL) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    expected = sum(len(tok.encode(t).ids) for t in TEXTS[:3])
    usage = _post(engine, {"input": TEXTS[:3]}).json()["usage"]
    assert usage == {"prompt_tokens": expected, "total_tokens": expected}


def test_base64_decodes_to_the_float_vectors(engine):
    floats = _vectors(_post(engine, {"input": TEXTS[:2]}).json())
    reply = _post(engine, {"input": TEXTS[:2], "encoding_format": "base64"}).json()
    decoded = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                        for d in reply["data"]])
    assert np.array_equal(decoded, floats.astype(np.float32))


def test_token_id_inputs(engine):
    text_reply = _post(engine, {"input": ["Hello world"]}).json()
    ids = [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    one = _post(engine, {"input": ids}).json()
    many = _post(engine, {"input": [ids, ids[:2] + ids[-1:]]}).json()
    assert one["usage"]["prompt_tokens"] == 4 and many["usage"]["prompt_tokens"] == 7
    assert np.allclose(_vectors(one)[0], _vectors(text_reply)[0], atol=1e-6)
    assert len(many["data"]) == 2


def test_dimensions_only_the_models_own(engine):
    assert _post(engine, {"input": "x", "dimensions": 384}).status_code == 200
    reply = _post(engine, {"input": "x", "dimensions": 128})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "dimensions"
    assert reply.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("body, param", [
    ({"input": "word " * 300}, "input"),
    ({"input": [101] * 257}, "input"),
])
def test_too_long_is_a_400_in_openai_shape(engine, body, param):
    reply = _post(engine, body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == param
    assert "256" in error["message"]


@pytest.mark.parametrize("body", [
    {"input": []}, {"input": ""}, {"input": ["ok", ""]}, {"input": [[]]},
    {"input": [30522]}, {"input": [-1]}, {"input": 5}, {"input": [1.5]},
    {"input": "x", "encoding_format": "int8"}, {"input": "x", "dimensions": 0},
    {"input": ["x"] * 2049}, {},
])
def test_bad_input_is_a_400(engine, body):
    reply = _post(engine, body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_a_404(engine):
    reply = _post(engine, {"input": "x", "model": "nope"})
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "model_not_found"


def test_generation_routes_refused(engine):
    reply = httpx.post(f"{engine}/v1/chat/completions",
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unsupported_endpoint"


def test_models_and_tokenize(engine):
    card = httpx.get(f"{engine}/v1/models").json()["data"][0]
    assert card["id"] == MODEL and card["max_model_len"] == 256
    tokens = httpx.post(f"{engine}/tokenize", json={"prompt": "Hello world"}).json()
    assert tokens["tokens"] == [101, 7592, 2088, 102] and tokens["count"] == 4


def test_concurrent_requests_share_forward_passes(engine, reference):
    def metric(name: str) -> float:
        text = httpx.get(f"{engine}/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{"))

    before_inputs = metric("inferplane_embedding_batch_inputs_total")
    before_tokens = metric("vllm:prompt_tokens_total")

    async def burst():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(client.post(f"{engine}/v1/embeddings",
                                                      json={"input": [t]}) for t in TEXTS * 3))

    replies = asyncio.run(burst())
    assert all(r.status_code == 200 for r in replies)
    for i, reply in enumerate(replies):  # every answer is its own input's vector
        vector = _vectors(reply.json())
        assert _cosine(vector, reference[i % len(TEXTS)][None])[0] >= 0.9999
    assert metric("inferplane_embedding_batch_inputs_total") - before_inputs == len(replies)
    tokens = sum(r.json()["usage"]["prompt_tokens"] for r in replies)
    assert metric("vllm:prompt_tokens_total") - before_tokens == tokens
