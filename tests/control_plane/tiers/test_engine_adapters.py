"""The engine's runtime LoRA API (vLLM contract) against a real simulated engine process."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from builtin_engine.errors import EngineError
from builtin_engine.serving.adapters import AdapterRegistry
from tests.control_plane.tiers.conftest import make_peft_dir


def _post(base: str, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{base}/{path}", timeout=30, **kwargs)


def _loaded(base: str) -> list[str]:
    return [a["name"] for a in httpx.get(f"{base}/lora_adapters", timeout=10).json()["data"]]


def _error(resp: httpx.Response, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code
    return err


def test_load_unload_and_errors(adapter_engine, tmp_path):
    a1, a2, a3 = (make_peft_dir(tmp_path, n) for n in ("a1", "a2", "a3"))
    ok = _post(adapter_engine, "load_lora_adapter", json={"lora_name": "a1", "lora_path": str(a1)})
    assert ok.status_code == 200 and "a1" in ok.text
    assert _loaded(adapter_engine) == ["a1"]

    dup = _post(adapter_engine, "load_lora_adapter", json={"lora_name": "a1", "lora_path": str(a2)})
    _error(dup, 400, "lora_already_loaded")
    missing = _post(adapter_engine, "load_lora_adapter",
                    json={"lora_name": "x", "lora_path": str(tmp_path / "nope")})
    assert _error(missing, 400, "lora_path_not_found")["param"] == "lora_path"
    _error(_post(adapter_engine, "load_lora_adapter", json={"lora_name": "x"}), 400)
    _error(_post(adapter_engine, "load_lora_adapter", content=b"{not json"), 400)

    assert _post(adapter_engine, "load_lora_adapter",
                 json={"lora_name": "a2", "lora_path": str(a2)}).status_code == 200
    full = _post(adapter_engine, "load_lora_adapter", json={"lora_name": "a3", "lora_path": str(a3)})
    assert _error(full, 429, "lora_slots_full")["type"] == "rate_limit_error"

    _error(_post(adapter_engine, "unload_lora_adapter", json={"lora_name": "zzz"}), 400,
           "lora_not_found")
    assert _post(adapter_engine, "unload_lora_adapter", json={"lora_name": "a1"}).status_code == 200
    assert _post(adapter_engine, "load_lora_adapter",
                 json={"lora_name": "a3", "lora_path": str(a3)}).status_code == 200
    assert sorted(_loaded(adapter_engine)) == ["a2", "a3"]


@pytest.mark.parametrize("breakage,fragment", [
    ("no_config", "adapter_config.json"),
    ("bad_rank", "rank"),
    ("no_weights", "adapter_model.safetensors"),
    ("bad_weights", "not a valid safetensors"),
    ("not_lora", "not supported"),
])
async def test_invalid_peft_dirs_are_400(tmp_path, breakage, fragment):
    path = make_peft_dir(tmp_path, "broken")
    config, weights = path / "adapter_config.json", path / "adapter_model.safetensors"
    if breakage == "no_config":
        config.unlink()
    elif breakage == "bad_rank":
        config.write_text('{"peft_type": "LORA", "r": 0}')
    elif breakage == "no_weights":
        weights.unlink()
    elif breakage == "bad_weights":
        weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00garbage!")
    else:
        config.write_text('{"peft_type": "IA3", "r": 4}')
    registry = AdapterRegistry(max_loras=1)
    with pytest.raises(EngineError) as info:
        await registry.load("broken", str(path))
    assert info.value.status == 400 and fragment in info.value.message
    assert registry.loaded == []


async def test_models_list_adapters_with_parent(tmp_path):
    registry = AdapterRegistry(max_loras=2, load_cost_s=0.05)
    await registry.load("sql-lora", str(make_peft_dir(tmp_path, "sql")))
    cards = registry.model_cards("base-model", max_model_len=512)
    assert [(c["id"], c["parent"], c["object"]) for c in cards] == [
        ("sql-lora", "base-model", "model")]
    assert cards[0]["root"].endswith("sql") and cards[0]["max_model_len"] == 512
    assert registry.is_loaded("sql-lora") and registry.loaded[0].rank == 4


async def test_concurrent_loads_cannot_oversubscribe_slots(tmp_path):
    registry = AdapterRegistry(max_loras=1, load_cost_s=0.2)
    paths = [str(make_peft_dir(tmp_path, n)) for n in ("x", "y")]
    results = await asyncio.gather(registry.load("x", paths[0]), registry.load("y", paths[1]),
                                   return_exceptions=True)
    errors = [r for r in results if isinstance(r, EngineError)]
    assert len(errors) == 1 and errors[0].status == 429
    assert len(registry.loaded) == 1
    with pytest.raises(EngineError) as dup:  # a name mid-load is a duplicate too
        await asyncio.gather(registry.load("z", paths[0]), registry.load("z", paths[0]))
    assert dup.value.status in (400, 429)
