"""Settings are typed sections validated once at load: a typo'd key anywhere is refused with
its full path, and `inferplane up` with such a file exits non-zero saying so."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from common.vocabulary import RoutingStrategy, Tier
from control_plane.settings import SettingsError, load_settings
from control_plane.tiers import tier_config_from_settings
from gateway.settings import GatewaySettings
from tests.conftest import ROOT


def write(tmp_path, config: dict):
    path = tmp_path / "inferplane.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def refusal(tmp_path, config: dict) -> str:
    with pytest.raises(SettingsError) as refused:
        load_settings(write(tmp_path, config))
    return str(refused.value)


@pytest.mark.parametrize("config,path", [
    ({"gateway": {"routing": {"strategyy": "p2c"}}}, "gateway.routing.strategyy"),
    ({"gateway": {"admission": {"queue_sizee": 3}}}, "gateway.admission.queue_sizee"),
    ({"gateway": {"limits": {"fail_mod": "fail_open"}}}, "gateway.limits.fail_mod"),
    ({"gateway": {"tracing": {"otlp": "http://x"}}}, "gateway.tracing.otlp"),
    ({"gateway": {"retriez": 1}}, "gateway.retriez"),
    ({"routing": {"prefix_block_char": 64}}, "routing.prefix_block_char"),
    ({"tiers": {"idle_ss": 30}}, "tiers.idle_ss"),
    ({"models": [{"name": "a"}, {"name": "b", "tierr": "cold"}]}, "models[1].tierr"),
    ({"models": [{"name": "a", "backends": [{"url": "http://h", "wieght": 2}]}]},
     "models[0].backends[0].wieght"),
    ({"server": {"keep_alive": 3}}, "server.keep_alive"),
    ({"databse_url": "sqlite://"}, "databse_url"),
])
def test_a_typod_key_anywhere_is_refused_with_its_path(tmp_path, config, path):
    message = refusal(tmp_path, config)
    assert f"inferplane.yaml: {path}: unknown key" in message
    assert message.count("\n") == 0  # one problem, one line


def test_bad_values_name_their_place_too(tmp_path):
    message = refusal(tmp_path, {
        "gateway": {"routing": {"strategy": "fastest"}, "retries": -1},
        "models": [{"name": "a", "tier": "lukewarm", "routing": "p3c"}],
        "tiers": {"promote_rps": 0.1, "demote_rps": 0.5}})
    lines = message.splitlines()
    assert len(lines) == 5, message
    for place in ("gateway.routing.strategy", "gateway.retries", "models[0].tier",
                  "models[0].routing", "tiers"):
        assert any(f": {place}: " in line for line in lines), (place, message)
    assert "'hot', 'warm' or 'cold'" in message and "hysteresis" in message


def test_a_redis_leader_lease_needs_redis(tmp_path):
    message = refusal(tmp_path, {"leader": {"lock": "redis"}})
    assert "leader.lock: redis needs redis_url" in message
    assert "leader.lock: " in refusal(tmp_path, {"leader": {"lock": "zookeeper"}})
    assert "leader.lease_ms: " in refusal(tmp_path, {"redis_url": "redis://127.0.0.1:6379/0",
                                                     "leader": {"lock": "redis", "lease_ms": 5}})


@pytest.mark.parametrize("model,place,words", [
    ({"name": "v", "engine": "vllm", "executable": "/bin/sh"}, "models[0].executable",
     "not in tiers.executables"),
    ({"name": "v", "engine_args": {"max-num-seqs; rm": 1}}, "models[0]", "not a flag name"),
    ({"name": "v", "engine_args": {"served_model_name": "a\n--host 0.0.0.0"}}, "models[0]",
     "control character"),
    ({"name": "v", "engine_args": {"lora_roots": [["nested"]]}}, "models[0]", "values are"),
    ({"name": "v", "engine_env": {"LD_PRELOAD=x": "y"}}, "models[0]", "environment variable"),
])
def test_started_engines_take_only_allowed_executables_and_plain_flags(tmp_path, model, place,
                                                                        words):
    message = refusal(tmp_path, {"models": [model]})
    assert words in message and place in message, message


def test_an_executable_listed_in_tiers_is_allowed(tmp_path):
    settings = load_settings(write(tmp_path, {
        "tiers": {"executables": ["/opt/vllm/bin/vllm"]},
        "models": [{"name": "v", "engine": "vllm", "executable": "/opt/vllm/bin/vllm",
                    "engine_args": {"kv_events_config": {"publisher": "zmq"}, "seed": 0}}]}))
    assert settings.models[0].executable == "/opt/vllm/bin/vllm"


def test_sections_are_typed_once_with_top_level_shorthands_applied(tmp_path):
    settings = load_settings(write(tmp_path, {
        "redis_url": "redis://127.0.0.1:6379/3", "routing": {"strategy": "p2c"},
        "tiers": {"idle_s": 12}, "engine_port_base": 9000,
        "models": [{"name": "a", "tier": "cold", "routing": "weighted"}]}))
    assert isinstance(settings.gateway, GatewaySettings)
    assert settings.gateway.routing.strategy is RoutingStrategy.P2C
    assert settings.gateway.redis_url == "redis://127.0.0.1:6379/3"
    assert settings.models[0].tier is Tier.COLD and settings.models[0].tier == "cold"
    config = tier_config_from_settings(settings)
    assert (config.idle_s, config.port_base, list(config.engines)) == (12.0, 9100, ["a"])
    # the gateway's own section wins over the shorthand
    own = load_settings(write(tmp_path, {"routing": {"strategy": "p2c"},
                                         "gateway": {"routing": {"strategy": "weighted"}}}))
    assert own.gateway.routing.strategy == "weighted"


def test_unreadable_files_are_refused_with_the_file_name(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SettingsError, match="missing.yaml"):
        load_settings(missing)
    path = tmp_path / "inferplane.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(SettingsError, match="top level must be a mapping"):
        load_settings(path)


def test_up_with_a_bad_config_exits_non_zero_with_the_path(tmp_path):
    path = write(tmp_path, {"gateway": {"routing": {"strategyy": "p2c"}}})
    done = subprocess.run([sys.executable, "-m", "control_plane", "up", "--config", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode != 0
    assert "gateway.routing.strategyy: unknown key" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".inferplane").exists()  # refused before anything was created
