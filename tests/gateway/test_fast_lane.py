"""gateway.request_path.fast_lane: which routes take the short way, and that it answers as FastAPI would
(middleware headers, the app's error handlers, dependency overrides honoured)."""
from __future__ import annotations

from typing import Annotated

import httpx
import pytest
from fastapi import Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel

from common.errors import OpenAIError, install_error_handlers
from common.request_context import RequestContextMiddleware
from gateway.request_path.fast_lane import GatewayApp, fast_route

CALLS: list[str] = []


async def who(request: Request) -> str:
    token = request.headers.get("authorization")
    if not token:
        raise OpenAIError(401, "missing API key", code="missing_api_key")
    return token


Who = Annotated[str, Depends(who)]


class Body(BaseModel):
    x: int


def make_app() -> GatewayApp:
    app = GatewayApp()
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware)

    @app.post("/v1/echo")
    async def echo(request: Request, principal: Who) -> Response:
        CALLS.append(request.scope.get("inferplane.fast_route") and "fast" or "slow")
        return Response((await request.body()) + principal.encode())

    @app.post("/v1/boom")
    async def boom(request: Request) -> Response:
        raise RuntimeError("unexpected")

    @app.post("/v1/model")
    async def model(body: Body) -> dict:
        return {"x": body.x}

    @app.get("/v1/get")
    async def get(request: Request) -> Response:
        return Response(b"got")

    return app


@pytest.fixture()
def app():
    CALLS.clear()
    return make_app()


async def _post(app, path: str, **kw) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://t") as client:
        return await client.post(path, **kw)


def test_only_request_taking_post_routes_are_eligible(app):
    eligible = {r.path for r in app.router.routes if fast_route(r) is not None}
    assert eligible == {"/v1/echo", "/v1/boom"}


async def test_routes_of_included_routers_take_the_short_way():
    from fastapi import APIRouter
    router = APIRouter(prefix="/v2")

    @router.post("/echo")
    async def echo2(request: Request, principal: Who) -> Response:
        CALLS.append(request.scope.get("inferplane.fast_route") and "fast" or "slow")
        return Response(principal.encode())

    app = make_app()
    app.include_router(router)
    CALLS.clear()
    r = await _post(app, "/v2/echo", headers={"authorization": "k2"})
    assert r.content == b"k2" and CALLS == ["fast"]


async def test_short_way_keeps_middleware_and_dependencies(app):
    r = await _post(app, "/v1/echo", content=b"hi ", headers={"authorization": "k1"})
    assert r.status_code == 200 and r.content == b"hi k1"
    assert len(r.headers["x-request-id"]) == 32
    assert CALLS == ["fast"]


async def test_errors_are_answered_by_the_apps_handlers(app):
    r = await _post(app, "/v1/echo", content=b"hi")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert "x-request-id" in r.headers
    r = await _post(app, "/v1/boom")
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"


async def test_other_routes_and_overrides_take_fastapis_way(app):
    r = await _post(app, "/v1/model", json={"x": "not a number"})
    assert r.status_code == 400   # FastAPI's validation, through the app's handler
    app.dependency_overrides[who] = lambda: "override"
    r = await _post(app, "/v1/echo", content=b"hi ")
    assert r.content == b"hi override" and CALLS == ["slow"]
