"""Runtime LoRA adapter bookkeeping behind vLLM's adapter API.

`POST /v1/load_lora_adapter {"lora_name", "lora_path"}` and
`POST /v1/unload_lora_adapter {"lora_name"}` follow vLLM's contract, so the control plane
drives the built-in engine and vLLM servers the same way. A PEFT adapter directory is
validated on load (adapter_config.json with a LoRA rank, adapter_model.safetensors with a
readable header); a name already loaded, a missing path or an unknown name is a 400, and a
full set of `max_loras` slots is a 429 (the caller unloads one first). Loaded adapters are
listed by /v1/models as models whose `parent` is the base model, as vLLM lists them.

Adapter paths are confined to the engine's adapter roots (`--lora-roots`): a path is resolved
(symlinks followed, `..` removed) before it is checked, and one outside every root is a 400
that says nothing about what lies there, so the route reveals no directory outside the roots.
An engine served without roots refuses every runtime load.

With a LoraStore (the real engine), loading reads the adapter's weights onto the engine's
device and the model runner applies them to the requests that name the adapter; unloading
frees them. Without one (the simulated engine) the registry is bookkeeping only (slots, load
latency, names the server accepts), so warm-tier residency, LRU eviction and LoRA-affinity
routing still work end to end against it.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builtin_engine.errors import EngineError
from common.error_codes import ErrorCode

if TYPE_CHECKING:  # the simulated engine never imports torch for adapters
    from builtin_engine.runner.lora import LoraStore

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoadedAdapter:
    name: str
    path: str
    rank: int
    loaded_at: float  # unix seconds


class AdapterRegistry:
    """The adapters one engine holds; at most `max_loras` at a time."""

    def __init__(self, max_loras: int = 4, load_cost_s: float = 0.0,
                 store: LoraStore | None = None, roots: list[str] | None = None):
        """roots: the directories adapters may be loaded from; None allows any path (for an
        engine embedded in a trusted process), [] refuses every runtime load."""
        if max_loras < 1:
            raise ValueError("max_loras must be at least 1")
        self.max_loras, self.load_cost_s, self.store = max_loras, load_cost_s, store
        self.roots = None if roots is None else [os.path.realpath(r) for r in roots]
        self._loaded: OrderedDict[str, LoadedAdapter] = OrderedDict()
        self._loading: set[str] = set()  # slots reserved while a load is in progress

    @property
    def loaded(self) -> list[LoadedAdapter]:
        return list(self._loaded.values())

    def get(self, name: str) -> LoadedAdapter | None:
        return self._loaded.get(name)

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    async def load(self, name: str, path: str) -> LoadedAdapter:
        if name in self._loaded or name in self._loading:
            raise EngineError(400, f"The lora adapter '{name}' has already been loaded.",
                              param="lora_name", code=ErrorCode.LORA_ALREADY_LOADED)
        path = self.confine(path)
        rank = read_peft_rank(Path(path))
        if len(self._loaded) + len(self._loading) >= self.max_loras:
            raise EngineError(429, f"all {self.max_loras} LoRA slots are in use; unload an "
                              "adapter first", param="lora_name", code=ErrorCode.LORA_SLOTS_FULL,
                              kind="rate_limit_error")
        self._loading.add(name)  # reserve the slot across the (simulated) load latency
        try:
            if self.load_cost_s > 0:
                await asyncio.sleep(self.load_cost_s)
            if self.store is not None:
                self.store.add(await asyncio.to_thread(self.store.read, name, path))
            adapter = LoadedAdapter(name, str(path), rank, time.time())
            self._loaded[name] = adapter
            return adapter
        finally:
            self._loading.discard(name)

    def confine(self, path: str) -> str:
        """The real path of `path` when it lies under an adapter root; a 400 otherwise."""
        real = os.path.realpath(path)
        if self.roots is None:
            return real
        if not self.roots:
            raise EngineError(400, "runtime LoRA loading is disabled: serve the engine with "
                              "--lora-roots DIR", param="lora_path", code=ErrorCode.LORA_PATH_NOT_ALLOWED)
        if any(os.path.commonpath([real, root]) == root for root in self.roots):
            return real
        raise EngineError(400, "lora_path is outside the engine's adapter roots (--lora-roots)",
                          param="lora_path", code=ErrorCode.LORA_PATH_NOT_ALLOWED)

    def unload(self, name: str) -> LoadedAdapter:
        adapter = self._loaded.pop(name, None)
        if adapter is None:
            raise EngineError(400, f"The lora adapter '{name}' cannot be found.",
                              param="lora_name", code=ErrorCode.LORA_NOT_FOUND)
        if self.store is not None:
            self.store.remove(name)
        return adapter

    def model_cards(self, base_name: str, max_model_len: int | None = None) -> list[dict]:
        """/v1/models entries for the loaded adapters (vLLM shape: parent = the base model)."""
        cards = []
        for a in self._loaded.values():
            card = {"id": a.name, "object": "model", "created": int(a.loaded_at),
                    "owned_by": "inferplane", "root": a.path, "parent": base_name}
            if max_model_len is not None:
                card["max_model_len"] = max_model_len
            cards.append(card)
        return cards


def read_peft_rank(path: Path) -> int:
    """Validate a PEFT LoRA directory and return its rank; 400 naming what is wrong."""
    if not path.is_dir():
        raise EngineError(400, f"LoRA adapter path '{path}' does not exist or is not a directory",
                          param="lora_path", code=ErrorCode.LORA_PATH_NOT_FOUND)
    config = _read_config(path / CONFIG_FILE)
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise EngineError(400, f"{path / CONFIG_FILE} has no positive integer LoRA rank 'r'",
                          param="lora_path", code=ErrorCode.INVALID_LORA_ADAPTER)
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise EngineError(400, f"adapter type {peft_type} is not supported (LORA only)",
                          param="lora_path", code=ErrorCode.INVALID_LORA_ADAPTER)
    _check_safetensors(path / WEIGHTS_FILE)
    return rank


def _read_config(config_path: Path) -> dict:
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise EngineError(400, f"{config_path.parent} has no {CONFIG_FILE}", param="lora_path",
                          code=ErrorCode.INVALID_LORA_ADAPTER) from None
    except (OSError, ValueError) as exc:
        raise EngineError(400, f"{config_path} is not readable JSON: {exc}", param="lora_path",
                          code=ErrorCode.INVALID_LORA_ADAPTER) from None
    if not isinstance(config, dict):
        raise EngineError(400, f"{config_path} must hold a JSON object", param="lora_path",
                          code=ErrorCode.INVALID_LORA_ADAPTER)
    return config


def _check_safetensors(weights: Path) -> None:
    from safetensors import safe_open

    if not weights.is_file():
        raise EngineError(400, f"{weights.parent} has no {WEIGHTS_FILE}", param="lora_path",
                          code=ErrorCode.INVALID_LORA_ADAPTER)
    try:  # reads only the header: cheap even for a large adapter
        with safe_open(str(weights), framework="numpy") as f:
            names = list(f.keys())
    except Exception as exc:  # noqa: BLE001 - safetensors raises several error types
        raise EngineError(400, f"{weights} is not a valid safetensors file: {exc}",
                          param="lora_path", code=ErrorCode.INVALID_LORA_ADAPTER) from None
    if not names:
        raise EngineError(400, f"{weights} holds no tensors", param="lora_path",
                          code=ErrorCode.INVALID_LORA_ADAPTER)


class LoadLoRARequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, max_length=200)
    lora_path: str = Field(min_length=1)


class UnloadLoRARequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, max_length=200)
    lora_int_id: int | None = None


async def _parse(request: Request, schema: type[BaseModel]) -> BaseModel:
    try:
        return schema.model_validate(orjson.loads(await request.body()))
    except orjson.JSONDecodeError:
        raise EngineError(400, "We could not parse the JSON body of your request.") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or None
        raise EngineError(400, f"{field + ': ' if field else ''}{err.get('msg')}",
                          param=field) from None


def router(registry: AdapterRegistry) -> APIRouter:
    """vLLM's runtime LoRA endpoints over `registry` (errors in the OpenAI shape)."""
    api = APIRouter()

    @api.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        try:
            body = await _parse(request, LoadLoRARequest)
            await registry.load(body.lora_name, body.lora_path)
        except EngineError as exc:
            return exc.response()
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @api.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Response:
        try:
            body = await _parse(request, UnloadLoRARequest)
            registry.unload(body.lora_name)
        except EngineError as exc:
            return exc.response()
        return PlainTextResponse(
            f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    @api.get("/v1/lora_adapters")
    async def lora_adapters() -> JSONResponse:
        data = [{"name": a.name, "path": a.path, "rank": a.rank, "loaded_at": a.loaded_at}
                for a in registry.loaded]
        return JSONResponse({"object": "list", "max_loras": registry.max_loras, "data": data})

    return api


__all__ = ["AdapterRegistry", "LoadedAdapter", "read_peft_rank", "router"]
