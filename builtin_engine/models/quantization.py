"""Weight-only int8 linear layers: per-output-channel symmetric scales, activations untouched.

    quantize_model(model, "int8")       # after load_weights: q/k/v, o, gate/up, down
    y = linear(x, layer.qkv_proj)       # a Parameter or an Int8Weight, same call

Each projection keeps int8 values and one scale per output row (max |w| / 127), a quarter of
the float32 bytes. The matmul runs in the activation dtype on the dequantised weight and the
row scale is applied to the output, so the only error is the weight rounding (measured as
next-token KL against float32 in tests/builtin_engine/model/test_quantization.py). Embeddings, norms
and the LM head stay in full precision: they are a small part of the compute and the most
sensitive to rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from builtin_engine.kernels.packed_linear import linear as packed_linear

PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@dataclass
class Int8Weight:
    values: torch.Tensor  # [out, in] int8
    scale: torch.Tensor  # [out] in the activation dtype

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> "Int8Weight":
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)
        values = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        return cls(values, scale.to(weight.dtype))

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    def dequantize(self) -> torch.Tensor:
        return self.values.to(self.scale.dtype) * self.scale[:, None]


def linear(x: torch.Tensor, weight) -> torch.Tensor:
    if isinstance(weight, Int8Weight):
        return F.linear(x, weight.values.to(x.dtype)) * weight.scale
    return packed_linear(x, weight)


def quantize_model(model, method: str | None) -> int:
    """Replace each decoder layer's projection weights in place; returns how many."""
    if method is None:
        return 0
    if method != "int8":
        raise ValueError(f"unknown quantization {method!r}; choose int8")
    count = 0
    for layer in model.layers:
        for name in PROJECTIONS:
            weight = getattr(layer, name)
            delattr(layer, name)  # an nn.Parameter slot cannot hold a non-tensor
            setattr(layer, name, Int8Weight.quantize(weight))
            count += 1
    return count
