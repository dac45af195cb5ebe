"""Load a model (weights + tokenizer) from a known name, a .gguf file or an HF directory."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from builtin_engine.loader.resolve import KNOWN_MODELS, ModelSource, resolve_model

__all__ = ["KNOWN_MODELS", "LoadedModel", "ModelSource", "load_model", "resolve_model"]

_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
           "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


@dataclass
class LoadedModel:
    model: object  # LlamaForCausalLM
    llama_config: object  # LlamaConfig
    tokenizer: object  # EngineTokenizer
    name: str
    context_length: int


def torch_dtype(name: str):
    import torch

    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}: expected one of {sorted(set(_DTYPES))}")
    return getattr(torch, _DTYPES[name])


def _llama_config(source: ModelSource):
    if source.kind == "gguf":
        from builtin_engine.loader.gguf_metadata import llama_config_from_gguf, open_gguf
        return llama_config_from_gguf(open_gguf(str(source.path)))
    from builtin_engine.loader.safetensors_loader import llama_config_from_hf
    return llama_config_from_hf(source.path)


def _weights(source: ModelSource, llama_config, progress):
    if source.kind == "gguf":
        from builtin_engine.loader.gguf_loader import iter_gguf_weights
        from builtin_engine.loader.gguf_metadata import open_gguf
        return iter_gguf_weights(open_gguf(str(source.path)), llama_config, progress)
    from builtin_engine.loader.safetensors_loader import iter_safetensors_weights
    return iter_safetensors_weights(source.path, progress)


def load_model(config, progress: Callable[[str, float], None] | None = None) -> LoadedModel:
    """Build the model on config.device in config.dtype and fill it from disk (never downloads)."""
    import torch

    from builtin_engine.kernels.packed_linear import calibrate_row_cap, pack_model
    from builtin_engine.loader.tokenizer import load_tokenizer
    from builtin_engine.models.llama import LlamaForCausalLM
    from builtin_engine.models.quantization import quantize_model

    dtype = torch_dtype(config.dtype)
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {config.device!r} requested but CUDA is not available")
    source = resolve_model(config.model)
    if progress is not None:
        progress("reading metadata", 0.0)
    llama_config = _llama_config(source)
    tokenizer = load_tokenizer(config.model)
    model = LlamaForCausalLM(llama_config, kernels=config.resolved_kernels(),
                             attention=config.resolved_attention_backend(),
                             device=config.device, dtype=dtype)
    model.load_weights(_weights(source, llama_config, progress))
    model.eval()
    quantize_model(model, getattr(config, "quantization", None))
    packing = getattr(config, "resolved_pack_weights", None)
    if packing is not None and packing()[0]:
        pack_model(model, batch_hint=config.max_num_seqs)
        if model.layers:  # the widest projection stands for all: the step's largest GEMMs
            calibrate_row_cap(model.layers[0].gate_up_proj, config.max_num_batched_tokens)
    if progress is not None:
        progress("ready", 1.0)
    return LoadedModel(model=model, llama_config=llama_config, tokenizer=tokenizer,
                       name=config.served_model_name or source.name,
                       context_length=llama_config.max_position)
