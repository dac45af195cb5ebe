"""API keys and JWTs: missing, bad, revoked, expired, allowlist, role checks."""
import time
from dataclasses import replace

import jwt
import pytest
from fastapi import Depends

from common.auth.authenticate import require_role
from tests.gateway.conftest import backend, chat_body, model
from tests.gateway.test_errors import assert_openai_error

SECRET = "jwt-test-secret-with-enough-length-32b"


@pytest.fixture
def gw(make_gateway, engines):
    gw = make_gateway([model("m", [backend(engines[0])]), model("other", [backend(engines[1])])],
                      jwt={"enabled": True, "secret": SECRET, "issuer": "https://idp",
                           "audience": "inferplane"})

    @gw.app.get("/admin/v1/ping")
    async def ping(principal=Depends(require_role("operator"))):
        return {"role": principal.role}
    return gw


def token(**claims) -> str:
    base = {"sub": "alice", "iss": "https://idp", "aud": "inferplane", "exp": time.time() + 60,
            "role": "user", "team": "ml", "models": ["m"]}
    base.update(claims)
    return jwt.encode(base, SECRET, algorithm="HS256")


def post(gw, key=None, bearer=None, body=None):
    with gw.client(key) as c:
        headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
        return c.post("/v1/chat/completions", json=body or chat_body(), headers=headers)


def test_missing_key_is_401(gw):
    assert_openai_error(post(gw, key=None), 401, code="missing_api_key")


def test_malformed_header_is_401(gw):
    with gw.client(None) as c:
        r = c.post("/v1/chat/completions", json=chat_body(), headers={"authorization": "Basic x"})
    assert_openai_error(r, 401)


def test_bad_key_is_401(gw):
    assert_openai_error(post(gw, bearer="ip-not-a-key"), 401, code="invalid_api_key")


def test_revoked_key_is_401(gw):
    assert "revoked" in assert_openai_error(post(gw, "revoked"), 401)["message"]


def test_expired_key_is_401(gw):
    assert "expired" in assert_openai_error(post(gw, "expired"), 401)["message"]


def test_model_outside_the_allowlist_looks_missing(gw):
    hidden = assert_openai_error(post(gw, "only_other"), 404, param="model",
                                 code="model_not_found")
    missing = assert_openai_error(post(gw, "only_other", body=chat_body("nope")), 404,
                                  param="model", code="model_not_found")
    assert hidden["message"].replace("'m'", "'nope'") == missing["message"]
    assert post(gw, "only_other", body=chat_body("other")).status_code == 200


def test_models_list_has_aliases_and_adapters_the_key_may_use(gw):
    snap = gw.source.current
    models = dict(snap.models)
    models["other"] = replace(models["other"], adapters=("sql",))
    models["m"] = replace(models["m"], adapters=("poet",))
    gw.source.current = replace(snap, models=models, aliases={"other:canary": "other",
                                                              "m:stable": "m"})
    with gw.client("only_other") as c:
        data = c.get("/v1/models").json()["data"]
    assert [(d["id"], d["parent"]) for d in data] == [
        ("other", None), ("other:sql", "other"), ("other:canary", "other")]
    assert post(gw, "only_other", body=chat_body("m:stable")).status_code == 404
    with gw.client("user") as c:
        ids = {d["id"] for d in c.get("/v1/models").json()["data"]}
    assert ids == {"m", "m:poet", "m:stable", "other", "other:sql", "other:canary"}


def test_models_list_follows_allowlist(gw):
    with gw.client("only_other") as c:
        ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
    with gw.client("user") as c:
        all_ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
    assert ids == ["other"]
    assert sorted(all_ids) == ["m", "other"]


def test_jwt_happy_path_and_model_claim(gw):
    assert post(gw, bearer=token()).status_code == 200
    assert_openai_error(post(gw, bearer=token(), body=chat_body("other")), 404,
                        code="model_not_found")


def test_jwt_expired_is_401(gw):
    assert_openai_error(post(gw, bearer=token(exp=time.time() - 10)), 401, code="token_expired")


def test_jwt_wrong_audience_and_issuer_are_401(gw):
    assert "audience" in assert_openai_error(post(gw, bearer=token(aud="someone-else")), 401)[
        "message"]
    assert "issuer" in assert_openai_error(post(gw, bearer=token(iss="https://evil")), 401)[
        "message"]


def test_jwt_bad_signature_is_401(gw):
    forged = jwt.encode({"sub": "x", "exp": time.time() + 60, "aud": "inferplane",
                         "iss": "https://idp"}, "another-secret-of-32-bytes-length!", "HS256")
    assert_openai_error(post(gw, bearer=forged), 401, code="invalid_token")


def test_require_role_nests_admin_over_operator(gw):
    with gw.client("admin") as c:
        assert c.get("/admin/v1/ping").json() == {"role": "admin"}
    with gw.client("user") as c:
        assert_openai_error(c.get("/admin/v1/ping"), 403, code="forbidden")
    with gw.client(None) as c:
        r = c.get("/admin/v1/ping", headers={"authorization": f"Bearer {token(role='operator')}"})
    assert r.json() == {"role": "operator"}


def test_a_keys_principal_is_made_once_per_view_of_the_key_and_follows_the_snapshot():
    from types import SimpleNamespace

    from common.auth.authenticate import principal_from_key
    from common.auth.keys import hash_key
    from tests.gateway.conftest import KEYS, key

    view = key("user", models=["m"])
    first = SimpleNamespace(keys={hash_key(KEYS["user"]): view})
    principal = principal_from_key(first, KEYS["user"])
    assert principal.models == ("m",)
    assert principal_from_key(first, KEYS["user"]) is principal    # same view: kept
    # a new snapshot with a new view of the key (its allowlist changed): a new principal
    changed = SimpleNamespace(keys={hash_key(KEYS["user"]): replace(view, models=["m", "x"])})
    assert principal_from_key(changed, KEYS["user"]).models == ("m", "x")
    revoked = SimpleNamespace(keys={hash_key(KEYS["user"]): replace(view, revoked=True)})
    with pytest.raises(Exception, match="revoked"):
        principal_from_key(revoked, KEYS["user"])
    expired = SimpleNamespace(keys={hash_key(KEYS["user"]): replace(view, expires_at=1.0)})
    with pytest.raises(Exception, match="expired"):
        principal_from_key(expired, KEYS["user"])
