"""The published /openapi.json, made true to what each operation answers.

    install_openapi(app)     # idempotent; the document is built on first request

FastAPI documents a 422 `HTTPValidationError` that this product never sends (validation
errors answer 400 in OpenAI's error shape) and none of the statuses raised from dependencies
or handlers. The statuses are derived from each route, so a new route is documented by the
same rules:

    any parameter or request body      400 (and 422 on admin writes: schema-valid, refused)
    authenticate / require_role         401, 403 (a JWT with an unknown role is a 403 too);
                                        the least role is published as x-required-role
    a path parameter, or ?model=        404
    admin writes (POST/PUT/PATCH/DELETE) 409 (duplicates, stale row versions, dependents)
    admin routes                        503 (registry database unavailable)
    POST /v1/*                          404, 413, 429, 502, 503, 504 (the proxied request path)

Statuses a route declares itself (`responses=` on the decorator) are kept. Every error
response has the `Error` schema: {"error": {"message", "type", "param", "code"}}.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from common.api_routes import api_routes
from common.auth.authenticate import authenticate
from common.auth.principal import ROLE_RANK

ADMIN = "/admin/"
WRITES = {"POST", "PUT", "PATCH", "DELETE"}
PROXY_ERRORS = (404, 413, 429, 502, 503, 504)
DESCRIPTIONS = {
    400: "Invalid request: the body, a parameter or a header does not match this document",
    401: "Missing, malformed, unknown, revoked or expired credential",
    403: "The credential's role does not allow this operation",
    404: "No such resource (or the key may not see it)",
    409: "Conflict with the current state: duplicate, stale row version or dependents",
    413: "Request body too large",
    422: "Well-formed, but refused by a rule beyond this schema (e.g. an unknown base version)",
    429: "Rate limit, budget or queue full; see Retry-After",
    502: "The engine failed",
    503: "Unavailable for now (no ready backend, registry database down); see Retry-After",
    504: "The engine timed out",
}
ERROR_SCHEMA = {
    "type": "object", "required": ["error"], "title": "Error",
    "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]},
                       "code": {"type": ["string", "null"]}}}},
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _dependency_calls(dependant) -> Iterator[Any]:
    for dep in dependant.dependencies:
        yield dep.call
        yield from _dependency_calls(dep)


def route_role(route: APIRoute) -> str | None:
    """The least role the route admits ("user" for any valid key), or None when it is open.
    A route that authenticates inside its body (to answer in its own error shape) declares
    its role as `openapi_extra={"x-required-role": ...}`."""
    if declared := (route.openapi_extra or {}).get("x-required-role"):
        return declared
    calls = list(_dependency_calls(route.dependant))
    roles = [c.required_role for c in calls if hasattr(c, "required_role")]
    if roles:
        return max(roles, key=ROLE_RANK.__getitem__)
    return "user" if authenticate in calls else None


def _params(dependant, kind: str) -> list:
    """The `kind` params (path_params, query_params, ...) of the route and its dependencies."""
    found = list(getattr(dependant, kind))
    for dep in dependant.dependencies:
        found += _params(dep, kind)
    return found


def _has_input(route: APIRoute) -> bool:
    kinds = ("path_params", "query_params", "header_params", "body_params")
    return any(_params(route.dependant, k) for k in kinds) \
        or "requestBody" in (route.openapi_extra or {})


def error_statuses(route: APIRoute, method: str) -> set[int]:
    """The error statuses `method` on `route` can answer (see the module docstring)."""
    codes: set[int] = set()
    admin = route.path_format.startswith(ADMIN)
    if _has_input(route):
        codes.add(400)
    if route_role(route) is not None:
        codes |= {401, 403}
    if route.dependant.path_params or any(p.name == "model"
                                          for p in _params(route.dependant, "query_params")):
        codes.add(404)
    if admin:
        codes.add(503)
        if method in WRITES:
            codes |= {404, 409}  # creates name other rows too (a team, a model, a version)
            if method != "DELETE":
                codes.add(422)
    elif method == "POST" and route.path_format.startswith("/v1/"):
        codes |= set(PROXY_ERRORS)
    return codes


def _document(doc: dict, app: FastAPI) -> dict:
    doc.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for route in api_routes(app):
        if not route.include_in_schema:
            continue
        for method in route.methods:
            operation = doc["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            if (role := route_role(route)) is not None:
                operation["x-required-role"] = role
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)  # FastAPI's default; re-added below where it is true
            for status in sorted(error_statuses(route, method) | _declared_errors(route)):
                entry = responses.setdefault(str(status), {})
                entry.setdefault("description", DESCRIPTIONS.get(status, "Error"))
                entry.setdefault("content", {"application/json": {"schema": ERROR_REF}})
    schemas = doc["components"]["schemas"]
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return doc


def _declared_errors(route: APIRoute) -> set[int]:
    return {int(s) for s in route.responses if str(s).isdigit() and int(s) >= 400}


def install_openapi(app: FastAPI) -> None:
    if getattr(app, "_true_openapi", False):
        return
    app._true_openapi = True

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                              openapi_version=app.openapi_version,
                              description=app.description)
            app.openapi_schema = _document(doc, app)
        return app.openapi_schema

    app.openapi = openapi


def openapi_body(schema: type[BaseModel], required: bool = True) -> dict:
    """openapi_extra documenting a body that the route parses itself (for speed and errors).

    The JSON schema is inlined: pydantic's `#/$defs/...` references do not resolve inside an
    OpenAPI document, where definitions live under #/components/schemas."""
    return {"requestBody": {"required": required, "content": {
        "application/json": {"schema": inline_refs(schema.model_json_schema())}}}}


def inline_refs(schema: dict) -> dict:
    """The schema with every local `$ref` replaced by its definition (models here are not
    recursive) and `$defs` (and the discriminators that point into them) dropped."""
    defs = schema.get("$defs", {})

    def expand(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**expand(defs[ref.removeprefix("#/$defs/")]), **expand(rest)}
            # a discriminator maps tags to $refs, which are gone: the oneOf alone still holds
            return {k: expand(v) for k, v in node.items() if k not in ("$defs", "discriminator")}
        if isinstance(node, list):
            return [expand(v) for v in node]
        return node

    return expand(schema)


__all__ = ["api_routes", "error_statuses", "inline_refs", "install_openapi", "openapi_body",
           "route_role"]
