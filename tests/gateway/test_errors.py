"""Every client error leaves as {"error": {message, type, param, code}} with the right status."""
import pytest

from tests.gateway.conftest import backend, chat_body, model


def assert_openai_error(response, status: int, param=None, code=None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


@pytest.fixture
def gw(make_gateway, engines):
    return make_gateway([model("m", [backend(engines[0])], context_length=1000),
                         model("down", [backend(engines[1], state="down")])])


def test_malformed_json_is_400(gw):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert_openai_error(r, 400, code="invalid_json")


@pytest.mark.parametrize("body,param", [
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": "hi"}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
     "temperature"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
     "max_tokens"),
    ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_invalid_body_is_400(gw, body, param):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    assert_openai_error(r, 400, param=param)


def test_n_greater_than_one_is_400(gw):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(n=2))
    assert_openai_error(r, 400, param="n")


def test_max_tokens_beyond_context_is_400(gw):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=5000))
        r2 = c.post("/v1/chat/completions", json=chat_body(max_completion_tokens=5000))
    assert_openai_error(r, 400, param="max_tokens", code="context_length_exceeded")
    assert_openai_error(r2, 400, param="max_completion_tokens")


def test_unknown_model_is_404(gw):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body("nope"))
        r2 = c.post("/v1/completions", json={"model": "nope", "prompt": "x"})
    assert_openai_error(r, 404, param="model", code="model_not_found")
    assert_openai_error(r2, 404, param="model")


def test_no_ready_backend_is_503(gw):
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body("down"))
    assert_openai_error(r, 503, code="no_ready_backend")


def test_engine_4xx_is_relayed_with_its_status(gw, engines):
    with gw.client() as c:
        r = c.post("/v1/chat/completions",
                   json={"model": "m", "messages": [{"role": "user", "content": "TOO_LONG"}]})
    error = assert_openai_error(r, 400)
    assert "too long" in error["message"]
    assert engines[0].stats()["requests"] == 1  # relayed, not retried elsewhere


def test_unknown_route_and_method_keep_the_shape(gw):
    with gw.client() as c:
        assert_openai_error(c.get("/v1/nothing"), 404)
        assert_openai_error(c.get("/v1/chat/completions"), 405)


def test_rate_limit_is_429_with_retry_after(make_gateway, engines):
    from tests.gateway.conftest import default_keys, key
    keys = default_keys()
    limited = key("user", rpm=2)
    keys[limited.key_hash] = limited
    gw = make_gateway([model("m", [backend(engines[0])])], keys=keys)
    with gw.client() as c:
        codes = [c.post("/v1/chat/completions", json=chat_body()).status_code for _ in range(2)]
        r = c.post("/v1/chat/completions", json=chat_body())
    assert codes == [200, 200]
    assert_openai_error(r, 429, code="rate_limit_exceeded")
    assert int(r.headers["retry-after"]) >= 1


def test_budget_refuses_a_request_whose_worst_case_does_not_fit(make_gateway, engines):
    from tests.gateway.conftest import default_keys, key
    keys = default_keys()
    limited = key("user", max_budget=0.2, budget_period="day")
    keys[limited.key_hash] = limited
    priced = model("m", [backend(engines[0])], price_in=1.0, price_out=1.0)  # $ per 1k tokens
    gw = make_gateway([priced], keys=keys)
    with gw.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body(max_tokens=1000))
        ok = c.post("/v1/chat/completions", json=chat_body(max_tokens=10))
    error = assert_openai_error(r, 429, code="budget_exceeded")
    assert "key budget ($0.20 per day) has $0.2000 left" in error["message"]
    assert "may cost up to $1.00" in error["message"] and "resets at" in error["message"]
    assert int(r.headers["retry-after"]) >= 1
    assert ok.status_code == 200
    assert engines[0].stats()["requests"] == 1  # the refused request never reached the engine


# --- domain errors: one base, one handler at the edge ------------------------------------

def _domain_error_app():
    from fastapi import FastAPI

    from common.errors import InferplaneError, install_error_handlers
    from control_plane.tiers.adapters import AdapterSlotsBusy
    from control_plane.tiers.store import UnknownModel
    from gateway.routing.router import NoBackend
    from gateway.traffic.admission import QueueFull, QueueTimeout
    from registry.errors import ConflictError, InvalidError, NotFoundError

    raised = {
        "queue_full": QueueFull("too many queued requests for 'm'", retry_after=2.2),
        "queue_timeout": QueueTimeout("timed out waiting for capacity on 'm'", 7.0),
        "no_backend": NoBackend("no ready backend for model 'm'", param="model"),
        "not_found": NotFoundError("model 'x' not found", param="name"),
        "conflict": ConflictError("row_version is 3", code="row_version_mismatch"),
        "invalid": InvalidError("unknown base version", param="base_version"),
        "tier": UnknownModel("model 'x' does not exist"),
        "slots": AdapterSlotsBusy("no free LoRA slot", retry_after_s=0.4),
        "override": InferplaneError("custom", status=418, code="teapot", type="odd_error"),
    }
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{name}")
    async def _raise(name: str):
        raise raised[name]

    return app


@pytest.mark.parametrize("name,status,code,param,kind,retry_after", [
    ("queue_full", 429, "queue_full", None, "rate_limit_error", "3"),
    ("queue_timeout", 503, "queue_timeout", None, "service_unavailable", "7"),
    ("no_backend", 503, "no_ready_backend", "model", "service_unavailable", None),
    ("not_found", 404, "not_found", "name", "not_found_error", None),
    ("conflict", 409, "row_version_mismatch", None, "conflict_error", None),
    ("invalid", 422, "invalid_value", "base_version", "invalid_request_error", None),
    ("tier", 404, "model_not_found", None, "not_found_error", None),
    ("slots", 503, "adapter_slots_busy", None, "service_unavailable", "1"),
    ("override", 418, "teapot", None, "odd_error", None),
])
def test_domain_errors_answer_in_the_api_shape(name, status, code, param, kind, retry_after):
    from fastapi.testclient import TestClient

    with TestClient(_domain_error_app()) as c:
        r = c.get(f"/raise/{name}")
    error = assert_openai_error(r, status, param=param, code=code)
    assert error["type"] == kind
    assert r.headers.get("retry-after") == retry_after


def test_every_domain_error_is_an_inferplane_error():
    from common.errors import InferplaneError, OpenAIError
    from control_plane.tiers.store import TierError
    from gateway.routing.router import NoBackend
    from gateway.traffic.admission import AdmissionRejected
    from registry.errors import RegistryError

    for kind in (AdmissionRejected, NoBackend, RegistryError, TierError, OpenAIError):
        assert issubclass(kind, InferplaneError), kind
    legacy = OpenAIError(400, "messages: must not be empty", param="messages")
    assert (legacy.status, legacy.code, legacy.type) == (400, None, "invalid_request_error")
