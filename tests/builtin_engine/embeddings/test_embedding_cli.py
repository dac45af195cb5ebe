"""`--task` for `inferplane engine serve`: auto detects an embedding model, embed insists."""
from __future__ import annotations

import pytest

from builtin_engine.embeddings.cli import embedding_dir_for
from builtin_engine.embeddings.model import embedding_model_dir


def test_auto_detects_the_embedding_model_and_leaves_generators_alone():
    assert embedding_dir_for("all-minilm-l6-v2", "auto") == embedding_model_dir("all-minilm-l6-v2")
    assert embedding_dir_for("smollm2-135m-instruct", "auto") is None


def test_task_embed_refuses_a_generating_model():
    with pytest.raises(SystemExit, match="not an embedding model"):
        embedding_dir_for("smollm2-135m-instruct", "embed")


def test_a_known_name_without_its_package_says_what_to_install(monkeypatch):
    from builtin_engine.embeddings import model as embedding_model
    monkeypatch.setitem(embedding_model.KNOWN_EMBEDDING_MODELS, "missing-model",
                        ("no_such_package_here", "model"))
    with pytest.raises(ValueError, match="pip install no-such-package-here"):
        embedding_dir_for("missing-model", "auto")
