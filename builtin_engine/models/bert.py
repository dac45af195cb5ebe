"""A BERT-family encoder (BERT, MiniLM, all-MiniLM-L6-v2, ...) in plain torch, filled from an HF
safetensors checkpoint. Padded batches: pad positions never receive attention.

    config = BertConfig.from_hf_dict(json.loads((model_dir / "config.json").read_text()))
    model = BertModel(config, device="cpu", dtype=torch.float32)
    model.load_weights(iter_safetensors_weights(model_dir))
    hidden = model(input_ids, attention_mask)  # [batch, seq, hidden]
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {"gelu": lambda x: F.gelu(x), "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
                "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}
# Checkpoints saved from a task model (BertForMaskedLM, ...) prefix the encoder's names.
_PREFIXES = ("bert.", "model.")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0

    @classmethod
    def from_hf_dict(cls, cfg: dict) -> "BertConfig":
        act = cfg.get("hidden_act", "gelu")
        if act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {act!r} for a BERT encoder")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        return cls(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                   num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
                   intermediate_size=cfg["intermediate_size"],
                   max_position=cfg.get("max_position_embeddings", 512),
                   type_vocab_size=cfg.get("type_vocab_size", 2),
                   layer_norm_eps=cfg.get("layer_norm_eps", 1e-12), hidden_act=act,
                   pad_token_id=cfg.get("pad_token_id") or 0)


class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig, **kw):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, **kw)
        self.position_embeddings = nn.Embedding(c.max_position, c.hidden_size, **kw)
        self.token_type_embeddings = nn.Embedding(max(c.type_vocab_size, 1), c.hidden_size, **kw)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps, **kw)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # Single-segment inputs: token type 0 everywhere (what sentence encoders are fed).
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
             + self.token_type_embeddings.weight[0])
        return self.LayerNorm(x)


class _Layer(nn.Module):
    def __init__(self, c: BertConfig, **kw):
        super().__init__()
        h = c.hidden_size
        self.num_heads, self.head_dim = c.num_heads, h // c.num_heads
        self.query, self.key, self.value = (nn.Linear(h, h, **kw) for _ in range(3))
        self.attn_out = nn.Linear(h, h, **kw)
        self.attn_norm = nn.LayerNorm(h, eps=c.layer_norm_eps, **kw)
        self.intermediate = nn.Linear(h, c.intermediate_size, **kw)
        self.output = nn.Linear(c.intermediate_size, h, **kw)
        self.out_norm = nn.LayerNorm(h, eps=c.layer_norm_eps, **kw)
        self.act = _ACTIVATIONS[c.hidden_act]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             scale=1.0 / math.sqrt(self.head_dim))
        x = self.attn_norm(x + self.attn_out(ctx.transpose(1, 2).reshape(b, s, h)))
        return self.out_norm(x + self.output(self.act(self.intermediate(x))))


# HF name inside one layer -> ours
_LAYER_NAMES = {"attention.self.query": "query", "attention.self.key": "key",
                "attention.self.value": "value", "attention.output.dense": "attn_out",
                "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "intermediate",
                "output.dense": "output", "output.LayerNorm": "out_norm"}


def _our_name(hf_name: str) -> str | None:
    """Our parameter name for an HF checkpoint name; None for tensors we do not use (the pooler,
    position_ids buffers, task heads)."""
    for prefix in _PREFIXES:
        hf_name = hf_name.removeprefix(prefix)
    if hf_name.startswith("embeddings.") and not hf_name.endswith("position_ids"):
        return hf_name
    if not hf_name.startswith("encoder.layer."):
        return None
    index, rest = hf_name.removeprefix("encoder.layer.").split(".", 1)
    module, _, leaf = rest.rpartition(".")
    ours = _LAYER_NAMES.get(module)
    return f"layers.{index}.{ours}.{leaf}" if ours else None


class BertModel(nn.Module):
    def __init__(self, config: BertConfig, device: str = "cpu", dtype=torch.float32):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.config = config
        self.embeddings = _Embeddings(config, **kw)
        self.layers = nn.ModuleList(_Layer(config, **kw) for _ in range(config.num_layers))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: [batch, seq] (mask 1 = token, 0 = padding)."""
        # [batch, 1, 1, seq] boolean: every query attends to the real keys only.
        mask = attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (hf_name, tensor) pairs in; every parameter must be filled exactly once."""
        params = dict(self.named_parameters())
        missing = set(params)
        for hf_name, tensor in weights:
            name = _our_name(hf_name)
            if name is None:
                continue
            if name not in params:
                raise ValueError(f"unexpected tensor {hf_name} in a BERT checkpoint")
            target = params[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(f"{hf_name}: shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(target.shape)}")
            with torch.no_grad():
                target.copy_(tensor.to(target.dtype))
            missing.discard(name)
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")
