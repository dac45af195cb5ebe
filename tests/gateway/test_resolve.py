"""The key's model allowlist covers fallbacks, aliases and adapters (real gateway, fake engines)."""
from __future__ import annotations

import pytest

from registry.snapshot import RoutingSnapshot
from tests.gateway.conftest import backend, chat_body, default_keys, key, model


def _keys(user_models):
    keys = default_keys()
    restricted = key("user", models=user_models)
    return {**{h: k for h, k in keys.items() if k.name != "user"}, restricted.key_hash: restricted}


@pytest.fixture
def fallback_gw(make_gateway, engines):
    def make(user_models):
        return make_gateway([model("m", [backend(engines[0], adapters=("lora1",))],
                                   fallbacks=("fb",),
                                   adapters=("lora1",)),
                             model("fb", [backend(engines[1])])],
                            keys=_keys(user_models), retries=0)
    return make


def test_a_key_restricted_to_a_model_is_never_served_by_its_fallback(fallback_gw, engines):
    gw = fallback_gw(("m",))
    engines[0].control(fail_status=500)
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert r.status_code == 502, r.text
    assert "fb" not in r.text and "e1" not in r.text
    assert engines[1].stats()["requests"] == 0


def test_a_fallback_the_key_may_use_serves_it(fallback_gw, engines):
    gw = fallback_gw(("m", "fb"))
    engines[0].control(fail_status=500)
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert r.status_code == 200 and r.json()["backend"] == "e1"


@pytest.mark.parametrize("allowlist, requested, status", [
    (("m",), "m:lora1", 200),          # a model admits its adapters
    (("m:lora1",), "m:lora1", 200),    # an adapter entry admits that adapter
    (("m:lora1",), "m", 404),          # ... and nothing else of the model
    (("fb",), "m:lora1", 404),
    (("fb",), "m", 404),
])
def test_adapters_and_models_are_checked_against_the_allowlist(fallback_gw, engines, allowlist,
                                                               requested, status):
    gw = fallback_gw(allowlist)
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(requested, max_tokens=1))
    assert r.status_code == status, r.text
    if status == 404:
        error = r.json()["error"]
        assert error["code"] == "model_not_found" and requested in error["message"]
        assert "fb" not in error["message"].replace(requested, "")


def test_aliases_are_checked_against_the_allowlist(make_gateway, engines):
    m = model("m", [backend(engines[0])])
    gw = make_gateway([m], keys=_keys(("m:prod",)))
    gw.source.current = RoutingSnapshot(version=2, models={"m": m},
                                        aliases={"m:prod": "m", "m:dev": "m"},
                                        keys=gw.source.current.keys)
    with gw.client() as c:
        assert c.post("/v1/chat/completions", json=chat_body("m:prod", max_tokens=1)).status_code == 200
        denied = c.post("/v1/chat/completions", json=chat_body("m:dev", max_tokens=1))
        assert denied.status_code == 404 and "m:dev" in denied.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json=chat_body("m", max_tokens=1)).status_code == 404

