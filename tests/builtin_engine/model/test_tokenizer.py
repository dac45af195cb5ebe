"""The tokenizer rebuilt from GGUF metadata agrees with transformers' GGUF tokenizer."""
from __future__ import annotations

import pytest

from builtin_engine.loader.tokenizer import load_tokenizer

TEXTS = [
    "Hello, world!",
    "12345 and 3.14159, 1,000,000 ; 2024-06-01",
    " 1 22 333 4444",
    "héllo wörld — naïve café",
    "日本語のテキストと中文字符",
    "emoji: 🤖🚀👍🏽 👨‍👩‍👧",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "  leading spaces and\ttabs\t\tand   runs     of spaces   ",
    "line1\r\nline2\n\n\nline3",
    "<|im_start|>user\nhi<|im_end|>\n",
    "don't I'll we're they've it's",
    "URL: https://example.com/a?b=c&d=e#frag",
    "",
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye 👋"}],
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("smollm2-135m-instruct")


def test_encode_matches_transformers(tok, hf_tokenizer):
    for text in TEXTS:
        assert tok.encode(text) == hf_tokenizer.encode(text, add_special_tokens=False), text


def test_decode_round_trips(tok, hf_tokenizer):
    for text in TEXTS:
        ids = tok.encode(text)
        assert tok.decode(ids, skip_special_tokens=False) == text
        assert tok.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_chat_template_matches_transformers(tok, hf_tokenizer):
    for messages in CONVERSATIONS:
        for gen in (True, False):
            ours = tok.apply_chat_template(messages, add_generation_prompt=gen)
            theirs = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=gen,
                                                      tokenize=False)
            assert ours == theirs
    assert ours.startswith("<|im_start|>system\nBe terse.<|im_end|>")


def test_special_tokens_and_stop_ids(tok):
    assert tok.eos_token_id == 2 and tok.bos_token_id == 1
    assert tok.vocab_size == 49152
    assert tok.encode("<|im_end|>") == [2]
    assert {2, 0} <= tok.stop_token_ids  # <|im_end|> and <|endoftext|>


def test_bad_chat_input_is_a_clear_error(tok):
    with pytest.raises(ValueError):
        tok.apply_chat_template([])
    with pytest.raises(ValueError):
        tok.apply_chat_template([{"content": "no role"}])


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model"):
        load_tokenizer("no-such-model-xyz")
