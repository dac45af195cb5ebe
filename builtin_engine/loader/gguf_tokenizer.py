"""Rebuild a `tokenizers.Tokenizer` from the vocabulary a GGUF file carries.

llama.cpp stores a byte-level BPE (`tokenizer.ggml.model == "gpt2"`) as its token strings,
already spelled in the GPT-2 byte alphabet, plus the merges. The pre-tokenizer is only named
(`tokenizer.ggml.pre`), so the split rules for each name are written out here.
"""
from __future__ import annotations

from dataclasses import dataclass

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from builtin_engine.loader.gguf_metadata import field_value

CONTROL_TOKEN_TYPE = 3
USER_DEFINED_TOKEN_TYPE = 4

# llama.cpp's LLAMA3 split, used by several "pre" names.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass
class GGUFTokenizerData:
    tokenizer: Tokenizer
    chat_template: str | None
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos_token: bool


def _byte_level_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        # SmolLM2's tokenizer.json: every digit on its own, then the GPT-2 regex.
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "falcon3", "dbrx"):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    return byte_level  # "default", "gpt2" and unknown names: the plain GPT-2 regex


def _special_tokens(tokens: list[str], token_types: list[int]) -> tuple[list, list]:
    special, user = [], []
    for token, kind in zip(tokens, token_types):
        if kind == CONTROL_TOKEN_TYPE:
            special.append(AddedToken(token, special=True, normalized=False))
        elif kind == USER_DEFINED_TOKEN_TYPE:
            user.append(AddedToken(token, special=False, normalized=False))
    return special, user


def build_gguf_tokenizer(reader) -> GGUFTokenizerData:
    kind = field_value(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {kind!r} (only byte-level BPE 'gpt2')")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_value(reader, "tokenizer.ggml.merges")]
    vocab = {token: i for i, token in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _byte_level_pre_tokenizer(field_value(reader, "tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    types = field_value(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    special, user = _special_tokens(tokens, list(types))
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)
    return GGUFTokenizerData(
        tokenizer=tok,
        chat_template=field_value(reader, "tokenizer.chat_template"),
        bos_token_id=field_value(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=field_value(reader, "tokenizer.ggml.eos_token_id"),
        add_bos_token=bool(field_value(reader, "tokenizer.ggml.add_bos_token", False)),
    )
