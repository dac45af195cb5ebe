"""LoRA weights in the fused llama layout, and the per-step batch that applies them.

A PEFT adapter stores, per layer and projection, A [r, in] and B [out, r]; the delta of a
projection is `x @ A.T @ B.T * scaling`. The llama model fuses q/k/v and gate/up into one
matmul each, so the A matrices of one fused projection are stacked ([sum r, in]: one shrink
matmul per group of rows) and each B expands its slice of the fused output. Scaling is
folded into B at load time. Several adapters share one batch (punica-style): rows are grouped
by adapter and each group gets its own deltas; rows without an adapter are not touched.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from builtin_engine.errors import EngineError
from common.error_codes import ErrorCode

if TYPE_CHECKING:
    from builtin_engine.models.llama import LlamaConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)"
                  r"\.lora_([AB])\.weight$")
# PEFT module name -> (fused projection, which slice of its output)
_FUSED = {"q_proj": ("qkv", 0), "k_proj": ("qkv", 1), "v_proj": ("qkv", 2),
          "o_proj": ("o", 0), "gate_proj": ("gate_up", 0), "up_proj": ("gate_up", 1),
          "down_proj": ("down", 0)}
SUPPORTED_MODULES = tuple(_FUSED)


def _invalid(message: str) -> EngineError:
    return EngineError(400, message, param="lora_path", code=ErrorCode.INVALID_LORA_ADAPTER)


@dataclass
class FusedLora:
    """One fused projection of one layer: stacked A, and each B with its output columns."""
    a: torch.Tensor  # [sum of ranks, in]
    # (B scaled [out_i, r_i], first row of this B's rank in `a`, output start, output end)
    bs: list[tuple[torch.Tensor, int, int, int]]

    def add_delta(self, x: torch.Tensor, rows: torch.Tensor | slice, out: torch.Tensor) -> None:
        shrunk = x[rows] @ self.a.T  # [n, sum r]
        for b, r0, start, end in self.bs:
            delta = shrunk[:, r0:r0 + b.shape[1]] @ b.T
            if isinstance(rows, slice):
                out[rows, start:end] += delta
            else:
                out[:, start:end].index_add_(0, rows, delta)


@dataclass
class LoraWeights:
    name: str
    rank: int
    scaling: float
    layers: list[dict[str, FusedLora]] = field(default_factory=list)  # per layer: fused -> lora

    @property
    def num_bytes(self) -> int:
        return sum(f.a.numel() * f.a.element_size() + sum(b.numel() * b.element_size()
                                                          for b, *_ in f.bs)
                   for layer in self.layers for f in layer.values())


class LoraShapes:
    """The in/out sizes of each PEFT module of a llama model, and the fused output offsets."""

    def __init__(self, cfg: LlamaConfig):
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        h, inter = cfg.hidden_size, cfg.intermediate_size
        self.num_layers = cfg.num_layers
        self.io = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                   "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
        self.offset = {"q_proj": 0, "k_proj": q, "v_proj": q + kv, "o_proj": 0,
                       "gate_proj": 0, "up_proj": inter, "down_proj": 0}


def read_lora_weights(name: str, path: Path, cfg: LlamaConfig, device: torch.device,
                      dtype: torch.dtype) -> LoraWeights:
    """Read a PEFT LoRA directory into the fused layout; 400 naming anything unsupported."""
    config = json.loads((path / CONFIG_FILE).read_text())
    rank, scaling = _rank_and_scaling(config)
    shapes = LoraShapes(cfg)
    pairs = _read_pairs(path / WEIGHTS_FILE, shapes)
    layers: list[dict[str, FusedLora]] = [{} for _ in range(shapes.num_layers)]
    for (layer, module) in sorted(pairs, key=lambda k: (k[0], SUPPORTED_MODULES.index(k[1]))):
        a, b = pairs[(layer, module)]
        _check_pair(layer, module, a, b, shapes, rank)
        a = a.to(device=device, dtype=dtype)
        b = (b.float() * scaling).to(device=device, dtype=dtype)
        fused_name = _FUSED[module][0]
        start = shapes.offset[module]
        fused = layers[layer].get(fused_name)
        if fused is None:
            layers[layer][fused_name] = FusedLora(a, [(b, 0, start, start + b.shape[0])])
        else:
            r0 = fused.a.shape[0]
            fused.a = torch.cat([fused.a, a])
            fused.bs.append((b, r0, start, start + b.shape[0]))
    return LoraWeights(name, rank, scaling, layers)


def _rank_and_scaling(config: dict) -> tuple[int, float]:
    if config.get("use_dora"):
        raise _invalid("DoRA adapters are not supported")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise _invalid("per-module rank_pattern / alpha_pattern is not supported")
    if config.get("bias", "none") != "none":
        raise _invalid("LoRA bias terms are not supported (bias must be 'none')")
    if config.get("modules_to_save"):
        raise _invalid("modules_to_save is not supported")
    targets = config.get("target_modules")
    if isinstance(targets, list):
        unknown = sorted(set(targets) - set(SUPPORTED_MODULES))
        if unknown:
            raise _invalid(f"target_modules {unknown} are not supported; "
                           f"supported: {list(SUPPORTED_MODULES)}")
    rank = config["r"]
    alpha = config.get("lora_alpha", rank)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise _invalid("lora_alpha must be a number")
    scaling = alpha / rank ** 0.5 if config.get("use_rslora") else alpha / rank
    return rank, float(scaling)


def _read_pairs(weights: Path, shapes: LoraShapes) -> dict[tuple[int, str], list]:
    from safetensors import safe_open

    pairs: dict[tuple[int, str], list] = {}
    with safe_open(str(weights), framework="pt", device="cpu") as f:
        for key in f.keys():
            match = _KEY.match(key)
            if match is None or match.group(3) not in _FUSED:
                raise _invalid(f"unsupported LoRA weight {key!r}; supported modules: "
                               f"{list(SUPPORTED_MODULES)}")
            layer, module = int(match.group(1)), match.group(3)
            if layer >= shapes.num_layers:
                raise _invalid(f"{key}: the model has only {shapes.num_layers} layers")
            pair = pairs.setdefault((layer, module), [None, None])
            pair[0 if match.group(4) == "A" else 1] = f.get_tensor(key)
    for (layer, module), (a, b) in pairs.items():
        if a is None or b is None:
            raise _invalid(f"layer {layer} {module}: lora_A and lora_B must both be present")
    return pairs


def _check_pair(layer: int, module: str, a: torch.Tensor, b: torch.Tensor,
                shapes: LoraShapes, r: int) -> None:
    fan_in, fan_out = shapes.io[module]
    if tuple(a.shape) != (r, fan_in) or tuple(b.shape) != (fan_out, r):
        raise _invalid(f"layer {layer} {module}: lora_A {tuple(a.shape)} / lora_B "
                       f"{tuple(b.shape)} do not fit this model (expected [{r}, {fan_in}] / "
                       f"[{fan_out}, {r}])")


class LoraStore:
    """Adapter weights resident on the engine's device, shared by the registry (which loads
    and unloads) and the model runner (which reads them while scheduling a step)."""

    def __init__(self, cfg: LlamaConfig, device: torch.device, dtype: torch.dtype):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self._weights: dict[str, LoraWeights] = {}
        self._lock = threading.Lock()  # the engine thread reads while the server writes

    def read(self, name: str, path: str | Path) -> LoraWeights:
        """Parse and move one adapter to the device (slow: call off the event loop)."""
        try:
            return read_lora_weights(name, Path(path), self.cfg, self.device, self.dtype)
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways
            raise _invalid(f"could not read LoRA adapter '{path}': {exc}") from None

    def add(self, weights: LoraWeights) -> None:
        with self._lock:
            self._weights[weights.name] = weights

    def remove(self, name: str) -> None:
        # Requests already running keep their own reference until they finish.
        with self._lock:
            self._weights.pop(name, None)

    def get(self, name: str) -> LoraWeights | None:
        with self._lock:
            return self._weights.get(name)

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None


class LoraBatch:
    """The adapters of one step: for each, the rows of the flat batch it applies to."""

    def __init__(self, groups: list[tuple[LoraWeights, torch.Tensor | slice]]):
        self.groups = groups

    def apply(self, layer: int, fused: str, x: torch.Tensor, out: torch.Tensor) -> None:
        """out[rows] += lora delta of `fused` in `layer`, for every adapter group."""
        for weights, rows in self.groups:
            lora = weights.layers[layer].get(fused)
            if lora is not None:
                lora.add_delta(x, rows, out)


__all__ = ["LoraBatch", "LoraStore", "LoraWeights", "read_lora_weights", "SUPPORTED_MODULES"]
