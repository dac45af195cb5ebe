"""Llama decoder over a flat token batch with a paged KV cache (no transformers at run time).

q/k/v and gate/up are stored fused so each layer runs three large matmuls instead of five.
Weights arrive by HF name through `load_weights`, which writes them into the fused slices.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from builtin_engine.kernels import get_ops
from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.models.quantization import linear


@dataclass
class LlamaConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_position: int = 2048
    tie_word_embeddings: bool = False


def _weight(*shape: int, like: dict) -> nn.Parameter:
    # Uninitialised on purpose: every weight is overwritten by the loader.
    return nn.Parameter(torch.empty(*shape, **like), requires_grad=False)


def rope_cos_sin_cache(head_dim: int, theta: float, max_position: int) -> torch.Tensor:
    """[max_position, head_dim] = cat(cos, sin), computed in fp32 the way HF does."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, ops, like: dict, index: int = 0):
        super().__init__()
        self.cfg = cfg
        self.index = index  # selects this layer's LoRA weights
        self.ops = ops
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.input_norm = _weight(cfg.hidden_size, like=like)
        self.qkv_proj = _weight(self.q_size + 2 * self.kv_size, cfg.hidden_size, like=like)
        self.o_proj = _weight(cfg.hidden_size, self.q_size, like=like)
        self.post_norm = _weight(cfg.hidden_size, like=like)
        self.gate_up_proj = _weight(2 * cfg.intermediate_size, cfg.hidden_size, like=like)
        self.down_proj = _weight(cfg.hidden_size, cfg.intermediate_size, like=like)

    def forward(self, positions, hidden, residual, kv_cache, meta, cos_sin_cache, lora=None):
        ops, eps = self.ops, self.cfg.rms_eps
        if residual is None:
            residual = hidden
            hidden = ops.rms_norm(hidden, self.input_norm, eps)
        else:
            hidden, residual = ops.rms_norm(hidden, self.input_norm, eps, residual)
        hidden = self._attention(positions, hidden, kv_cache, meta, cos_sin_cache, lora)
        hidden, residual = ops.rms_norm(hidden, self.post_norm, eps, residual)
        return self._mlp(hidden, lora), residual

    def _mlp(self, hidden, lora):
        gate_up = linear(hidden, self.gate_up_proj)
        if lora is not None:
            lora.apply(self.index, "gate_up", hidden, gate_up)
        act = self.ops.silu_and_mul(gate_up)
        out = linear(act, self.down_proj)
        if lora is not None:
            lora.apply(self.index, "down", act, out)
        return out

    def _attention(self, positions, hidden, kv_cache, meta, cos_sin_cache, lora):
        cfg, ops = self.cfg, self.ops
        num_tokens = hidden.shape[0]
        qkv = linear(hidden, self.qkv_proj)
        if lora is not None:
            lora.apply(self.index, "qkv", hidden, qkv)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, cfg.num_heads, cfg.head_dim)
        k = k.view(num_tokens, cfg.num_kv_heads, cfg.head_dim)
        v = v.view(num_tokens, cfg.num_kv_heads, cfg.head_dim)
        q, k = ops.rotary(q, k, positions, cos_sin_cache)
        k_cache, v_cache = kv_cache
        ops.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        attn = ops.paged_attention(q, k_cache, v_cache, meta, self.scale).reshape(
            num_tokens, self.q_size)
        out = linear(attn, self.o_proj)
        if lora is not None:
            lora.apply(self.index, "o", attn, out)
        return out


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: LlamaConfig, kernels: str = "torch", attention: str | None = None,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg = cfg
        self.ops = get_ops(kernels, attention=attention)
        like = {"device": device, "dtype": dtype}
        self.embed_tokens = _weight(cfg.vocab_size, cfg.hidden_size, like=like)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(cfg, self.ops, like, i) for i in range(cfg.num_layers))
        self.norm = _weight(cfg.hidden_size, like=like)
        self.lm_head = self.embed_tokens if cfg.tie_word_embeddings else _weight(
            cfg.vocab_size, cfg.hidden_size, like=like)
        # Kept in fp32 whatever the weight dtype; rotary casts per use, as HF does.
        cache = rope_cos_sin_cache(cfg.head_dim, cfg.rope_theta, cfg.max_position).to(device)
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                meta: AttentionMetadata, lora=None) -> torch.Tensor:
        """`lora` (a LoraBatch, or None when no request of the step has an adapter) adds
        each adapter's deltas to its rows of the projection outputs."""
        hidden = F.embedding(input_ids, self.embed_tokens)
        residual = None
        for layer, kv_cache in zip(self.layers, kv_caches):
            hidden, residual = layer(positions, hidden, residual, kv_cache, meta,
                                     self.cos_sin_cache, lora)
        hidden, _ = self.ops.rms_norm(hidden, self.norm, self.cfg.rms_eps, residual)
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(hidden, self.lm_head).float()

    def load_weights(self, weights) -> None:
        """Copy (hf_name, tensor) pairs into place; raises if any weight is left unset."""
        loader = LlamaWeightMap(self)
        for name, tensor in weights:
            loader.load(name, tensor)
        loader.check_complete()


_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)\.weight$")


class LlamaWeightMap:
    """HF checkpoint names -> (parameter, row slice) of the fused layout."""

    def __init__(self, model: LlamaForCausalLM):
        self.model = model
        cfg = model.cfg
        q, kv, inter = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
        self.layer_slices = {
            "self_attn.q_proj": ("qkv_proj", 0, q),
            "self_attn.k_proj": ("qkv_proj", q, q + kv),
            "self_attn.v_proj": ("qkv_proj", q + kv, q + 2 * kv),
            "self_attn.o_proj": ("o_proj", None, None),
            "mlp.gate_proj": ("gate_up_proj", 0, inter),
            "mlp.up_proj": ("gate_up_proj", inter, 2 * inter),
            "mlp.down_proj": ("down_proj", None, None),
            "input_layernorm": ("input_norm", None, None),
            "post_attention_layernorm": ("post_norm", None, None),
        }
        self.expected = {f"model.layers.{i}.{s}.weight" for i in range(cfg.num_layers)
                         for s in self.layer_slices}
        self.expected |= {"model.embed_tokens.weight", "model.norm.weight"}
        if not cfg.tie_word_embeddings:
            self.expected.add("lm_head.weight")
        self.seen: set[str] = set()

    def load(self, name: str, tensor: torch.Tensor) -> None:
        if name.endswith("rotary_emb.inv_freq") or (
                name == "lm_head.weight" and self.model.cfg.tie_word_embeddings):
            return  # recomputed / shared with the embedding
        target, start, end = self._target(name)
        dest = target if start is None else target[start:end]
        if tuple(dest.shape) != tuple(tensor.shape):
            raise ValueError(f"weight {name}: shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}")
        with torch.no_grad():
            dest.copy_(tensor)
        self.seen.add(name)

    def _target(self, name: str):
        m = self.model
        if name == "model.embed_tokens.weight":
            return m.embed_tokens, None, None
        if name == "model.norm.weight":
            return m.norm, None, None
        if name == "lm_head.weight" and not m.cfg.tie_word_embeddings:
            return m.lm_head, None, None
        match = _LAYER_NAME.match(name)
        if match and int(match.group(1)) < m.cfg.num_layers and match.group(2) in self.layer_slices:
            attr, start, end = self.layer_slices[match.group(2)]
            return getattr(m.layers[int(match.group(1))], attr), start, end
        raise ValueError(f"unexpected weight {name!r}")

    def check_complete(self) -> None:
        missing = sorted(self.expected - self.seen)
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}")
