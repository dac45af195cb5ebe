"""Engine templates from the settings file: builtin and vllm models without fixed backends get
one (with the vllm executable, flags and environment), other kinds and fixed backends none."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from control_plane.settings import ModelSpec, Settings
from control_plane.tiers import EngineTemplate, tier_config_from_settings

VLLM = {"name": "big", "engine": "vllm", "tier": "cold", "model": "/models/big-hf",
        "executable": "/opt/vllm/bin/vllm", "engine_args": {"max_loras": 1},
        "engine_env": {"VLLM_CPU_KVCACHE_SPACE": "2"}}


def test_templates_for_startable_models_only():
    settings = Settings(models=[
        VLLM, {"name": "small", "tier": "cold", "engine_args": {"max_num_seqs": 8}},
        {"name": "elsewhere", "engine": "sglang", "tier": "cold"},
        {"name": "fixed", "engine": "vllm", "backends": [{"url": "http://10.0.0.5:8000/v1"}]}],
        tiers={"idle_s": 30, "executables": ["/opt/vllm/bin/vllm"]})
    config = tier_config_from_settings(settings)
    assert set(config.engines) == {"big", "small"} and config.idle_s == 30
    big = config.engines["big"]
    assert big == EngineTemplate("/models/big-hf", args={"max_loras": 1}, engine="vllm",
                                 executable="/opt/vllm/bin/vllm",
                                 env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    spec = big.spec("big", 8300)
    assert spec.command()[:3] == ["/opt/vllm/bin/vllm", "serve", "/models/big-hf"]
    assert spec.env == {"VLLM_CPU_KVCACHE_SPACE": "2"} and spec.url == "http://127.0.0.1:8300/v1"
    assert config.engines["small"].engine == "builtin"


def test_vllm_model_defaults_to_its_name_and_executable_is_vllm_only():
    assert ModelSpec(name="org/model", engine="vllm").model == "org/model"
    with pytest.raises(ValidationError, match="executable applies to engine: vllm"):
        ModelSpec(name="m", executable="/usr/bin/python3")


def test_a_template_of_an_unstartable_kind_is_refused():
    with pytest.raises(ValueError, match="cannot be started"):
        EngineTemplate("m", engine="tgi")
