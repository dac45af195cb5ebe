"""Read GGUF key/value metadata: typed field access and the llama hyper-parameters."""
from __future__ import annotations

from functools import lru_cache

from builtin_engine.models.llama import LlamaConfig

_MISSING = object()


@lru_cache(maxsize=4)
def open_gguf(path: str):
    """A memory-mapped reader; cached because the tokenizer and the weights read the same file."""
    import gguf

    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError) as exc:
        raise ValueError(f"cannot read GGUF file {path}: {exc}") from exc


def field_value(reader, key: str, default=_MISSING):
    field = reader.fields.get(key)
    if field is None:
        if default is _MISSING:
            raise ValueError(f"GGUF metadata lacks {key!r}")
        return default
    return field.contents()


def llama_config_from_gguf(reader) -> LlamaConfig:
    arch = field_value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r} (only 'llama')")

    def meta(key, default=_MISSING):
        return field_value(reader, f"{arch}.{key}", default)

    hidden = int(meta("embedding_length"))
    heads = int(meta("attention.head_count"))
    names = {t.name for t in reader.tensors}
    vocab = meta("vocab_size", None)
    if vocab is None:
        vocab = len(field_value(reader, "tokenizer.ggml.tokens"))
    return LlamaConfig(
        hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")),
        num_layers=int(meta("block_count")),
        num_heads=heads,
        num_kv_heads=int(meta("attention.head_count_kv", heads)),
        head_dim=int(meta("attention.key_length", hidden // heads)),
        vocab_size=int(vocab),
        rope_theta=float(meta("rope.freq_base", 10000.0)),
        rms_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position=int(meta("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
    )
