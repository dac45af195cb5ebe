"""/openapi.json describes what the app answers: valid references, the error statuses each
operation really returns (400 for validation, never FastAPI's 422 schema), correct Allow."""
from __future__ import annotations

import httpx
import pytest

from tests.control_plane.conftest import build_admin_app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi') / 'registry.db'}"
    app, sessions, _source, keys = build_admin_app(url, on_gateway=True)
    yield app, keys
    sessions.kw["bind"].dispose()


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(doc: dict, ref: str):
    assert ref.startswith("#/"), ref
    node = doc
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_every_reference_resolves(app):
    doc = app[0].openapi()
    refs = set(_refs(doc))
    assert "#/components/schemas/Error" in refs
    for ref in refs:
        assert _resolve(doc, ref) is not None, ref
    assert "$defs" not in str(doc)


def test_validation_is_documented_as_400_with_the_error_schema(app):
    doc = app[0].openapi()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    chat = doc["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"400", "401", "404", "429", "503"} <= set(chat) and "422" not in chat
    keys = doc["paths"]["/admin/v1/keys/{key_id}"]
    assert {"400", "401", "403", "404", "503"} <= set(keys["get"]["responses"])
    assert {"409", "422"} <= set(keys["patch"]["responses"])
    error = keys["patch"]["responses"]["400"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"}
    put = doc["paths"]["/admin/v1/models/{name}/aliases/{alias}"]["put"]["responses"]
    assert {"200", "201"} <= set(put)
    assert doc["paths"]["/healthz"]["get"]["responses"].keys() == {"200"}


async def test_405_allows_every_method_of_the_path(app):
    application, keys = app
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://doc") as client:
        h = {"Authorization": f"Bearer {keys['admin']}"}
        r = await client.delete("/admin/v1/keys/1", headers=h)
        assert r.status_code == 405 and r.headers["allow"] == "GET, PATCH"
        r = await client.put("/admin/v1/models/m", headers=h)
        assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET, PATCH"
        assert r.json()["error"]["type"] == "invalid_request_error"
        r = await client.get("/v1/chat/completions")
        assert r.status_code == 405 and r.headers["allow"] == "POST"


def _integers(node, path=""):
    """(path, schema) of every integer schema under node."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            yield path, node
        for key, value in node.items():
            yield from _integers(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _integers(value, f"{path}.{i}")


def test_every_request_integer_is_bounded(app):
    """An integer the document leaves unbounded invites one of 5,000 digits, which pydantic
    cannot parse: a schema-valid body refused with 400 (what schemathesis found on
    /v1/messages' top_k)."""
    doc = app[0].openapi()
    bodies = {f"{method} {path}": op["requestBody"]
              for path, item in doc["paths"].items() if path.startswith("/v1/")
              for method, op in item.items() if isinstance(op, dict) and "requestBody" in op}
    assert {"post /v1/messages", "post /v1/responses"} <= set(bodies)
    found = [(where + path, schema) for where, body in bodies.items()
             for path, schema in _integers(body)]
    assert found
    unbounded = [where for where, schema in found
                 if "maximum" not in schema and "exclusiveMaximum" not in schema]
    assert not unbounded, unbounded
