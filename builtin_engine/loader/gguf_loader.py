"""Llama weights from a GGUF file: dequantise each tensor and hand it over by HF name."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import torch

from builtin_engine.models.llama import LlamaConfig

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.weight$")


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.match(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.weight"
    raise ValueError(f"unsupported GGUF tensor {gguf_name!r}")


def reverse_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row interleave so rotary can use HF's rotate-half layout.

    convert_hf_to_gguf.py reshapes rows to (n_head, 2, dim/2) and swaps the middle axes;
    swapping them back restores the original order.
    """
    dim = weight.shape[0] // n_head // 2
    w = weight.reshape(n_head, dim, 2, *weight.shape[1:])
    return w.swapaxes(2, 1).reshape(weight.shape)


def dequantize(tensor) -> np.ndarray:
    from gguf.quants import dequantize as gguf_dequantize

    array = gguf_dequantize(tensor.data, tensor.tensor_type)
    # The reader lists dims innermost-first; the row-major shape is the reverse.
    return np.asarray(array, dtype=np.float32).reshape([int(d) for d in reversed(tensor.shape)])


def iter_gguf_weights(reader, cfg: LlamaConfig,
                      progress: Callable[[str, float], None] | None = None
                      ) -> Iterator[tuple[str, torch.Tensor]]:
    tensors = list(reader.tensors)
    for index, tensor in enumerate(tensors):
        name = hf_name(tensor.name)
        array = dequantize(tensor)
        if ".attn_q." in tensor.name:
            array = reverse_permute(array, cfg.num_heads)
        elif ".attn_k." in tensor.name:
            array = reverse_permute(array, cfg.num_kv_heads)
        # F32 tensors come straight from the read-only memory map; torch wants a writable array.
        yield name, torch.from_numpy(np.require(array, requirements=["C", "W"]))
        if progress is not None:
            progress("loading weights", (index + 1) / len(tensors))
