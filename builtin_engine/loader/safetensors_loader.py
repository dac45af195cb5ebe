"""Llama weights and hyper-parameters from an HF directory (config.json + *.safetensors)."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from builtin_engine.models.llama import LlamaConfig


def read_hf_config(model_dir: Path) -> dict:
    path = model_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"{model_dir} has no config.json")
    return json.loads(path.read_text())


def llama_config_from_hf(model_dir: Path) -> LlamaConfig:
    hf = read_hf_config(model_dir)
    archs = hf.get("architectures") or []
    if hf.get("model_type") != "llama" and "LlamaForCausalLM" not in archs:
        raise ValueError(f"unsupported model_type {hf.get('model_type')!r} in {model_dir} (only llama)")
    # transformers >= 5 writes rope settings under "rope_parameters".
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ValueError(f"rope scaling {rope!r} is not supported")
    theta = hf.get("rope_theta") or rope.get("rope_theta") or 10000.0
    hidden, heads = hf["hidden_size"], hf["num_attention_heads"]
    return LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hidden // heads,
        vocab_size=hf["vocab_size"],
        rope_theta=float(theta),
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_position=int(hf.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
    )


def iter_safetensors_weights(model_dir: Path,
                             progress: Callable[[str, float], None] | None = None
                             ) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir} has no *.safetensors files")
    handles = [safe_open(str(f), framework="pt") for f in files]
    keys = [(h, k) for h in handles for k in h.keys()]
    for index, (handle, key) in enumerate(keys):
        yield key, handle.get_tensor(key)
        if progress is not None:
            progress("loading weights", (index + 1) / len(keys))
