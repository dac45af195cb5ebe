"""Streaming detokenisation never emits part of a UTF-8 character."""
from __future__ import annotations

import pytest

from builtin_engine.loader.tokenizer import load_tokenizer

TEXTS = [
    "Robots 🤖 go 🚀 fast 👍🏽!",
    "日本語のテキスト、中文字符和한국어",
    "mixed: café 🙂 naïve 你好 done",
    "family 👨‍👩‍👧 and flags 🇫🇷🇯🇵",
    " leading space then text",
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("smollm2-135m-instruct")


def _stream(tok, ids):
    detok = tok.new_detokenizer()
    chunks = [detok.push([i]) for i in ids]
    return chunks, detok.flush()


def test_one_token_at_a_time_reassembles_exactly(tok):
    for text in TEXTS:
        ids = tok.encode(text)
        chunks, rest = _stream(tok, ids)
        assert all("\ufffd" not in c for c in chunks), chunks
        assert "".join(chunks) + rest == text
        assert rest == ""


def test_partial_character_is_held_back(tok):
    ids = tok.encode("🤖")
    assert len(ids) > 1  # byte-level BPE splits this emoji over several tokens
    detok = tok.new_detokenizer()
    assert [detok.push([i]) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.push(ids[-1:]) == "🤖"


def test_multi_token_pushes_and_special_tokens(tok):
    ids = tok.encode("Hi 你好<|im_end|>")
    detok = tok.new_detokenizer()
    out = detok.push(ids[:3]) + detok.push(ids[3:]) + detok.flush()
    assert out == "Hi 你好"  # special tokens are skipped by default


def test_flush_emits_an_incomplete_tail(tok):
    ids = tok.encode("ok 🤖")
    detok = tok.new_detokenizer()
    streamed = "".join(detok.push([i]) for i in ids[:-1])
    assert streamed == "ok"  # the space shares a token with the emoji's first byte
    assert detok.flush() == " \ufffd"  # the truncated emoji surfaces only at the end
