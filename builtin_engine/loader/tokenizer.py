"""The engine's tokenizer: encode/decode, chat template, stop ids and streaming detokenisation."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from builtin_engine.loader.chat_template import ChatTemplate
from builtin_engine.loader.resolve import resolve_model

# Tokens that end a turn in common chat formats; each is a stop id where the vocabulary has it.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
                       "<end_of_turn>", "<|end|>", "</s>")
_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Streams text for a growing token list without ever splitting a UTF-8 character.

    Byte-level BPE tokens can hold part of a character, and some decoders drop a leading
    space on the first token, so each push decodes a short window that starts a few tokens
    back (prefix) and emits only what the newest tokens added. Text that ends in U+FFFD is an
    incomplete character and waits for the next token.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_ids: list[int]) -> str:
        self._ids.extend(token_ids)
        prefix_text = self._decode(self._ids[self._prefix_offset:self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset:])
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT_CHAR):
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return full_text[len(prefix_text):]

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix_offset:self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset:])
        self._prefix_offset = self._read_offset = len(self._ids)
        return full_text[len(prefix_text):]


class EngineTokenizer:
    def __init__(self, tokenizer: Tokenizer, chat_template: str | None,
                 bos_token_id: int | None, eos_token_id: int | None, add_bos_token: bool = False):
        self.tokenizer = tokenizer
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.add_bos_token = add_bos_token and bos_token_id is not None
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.bos_token = self._token_text(bos_token_id)
        self.eos_token = self._token_text(eos_token_id)
        self._template = ChatTemplate(chat_template) if chat_template else None
        self.stop_token_ids = self._find_stop_ids()

    def _token_text(self, token_id: int | None) -> str:
        return "" if token_id is None else (self.tokenizer.id_to_token(token_id) or "")

    def _find_stop_ids(self) -> set[int]:
        ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        for text in _END_OF_TURN_TOKENS:
            token_id = self.tokenizer.token_to_id(text)
            if token_id is not None:
                ids.add(token_id)
        return ids

    def encode(self, text: str) -> list[int]:
        try:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        except TypeError:  # JSON may carry lone surrogates ("\ud800"), which are not text
            text = text.encode("utf-8", "replace").decode("utf-8")
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.add_bos_token and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if self._template is None:
            raise ValueError("this model has no chat template; use the completions API")
        return self._template.render(messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=self.bos_token, eos_token=self.eos_token)

    def new_detokenizer(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self.tokenizer, skip_special_tokens)


def _hf_dir_tokenizer(model_dir: Path) -> EngineTokenizer:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"{model_dir} has no tokenizer.json")
    tok = Tokenizer.from_file(str(path))
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    template = cfg.get("chat_template")
    jinja_path = model_dir / "chat_template.jinja"
    if template is None and jinja_path.is_file():
        template = jinja_path.read_text()

    def token_id(key: str) -> int | None:
        value = cfg.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return tok.token_to_id(value) if isinstance(value, str) else None

    return EngineTokenizer(tok, template if isinstance(template, str) else None,
                           token_id("bos_token"), token_id("eos_token"),
                           bool(cfg.get("add_bos_token", False)))


@lru_cache(maxsize=8)
def load_tokenizer(model_ref: str) -> EngineTokenizer:
    """The tokenizer alone (no weights are read), for a model name, .gguf path or HF dir."""
    source = resolve_model(model_ref)
    if source.kind == "hf":
        return _hf_dir_tokenizer(source.path)
    from builtin_engine.loader.gguf_metadata import open_gguf
    from builtin_engine.loader.gguf_tokenizer import build_gguf_tokenizer

    data = build_gguf_tokenizer(open_gguf(str(source.path)))
    return EngineTokenizer(data.tokenizer, data.chat_template, data.bos_token_id,
                           data.eos_token_id, data.add_bos_token)
