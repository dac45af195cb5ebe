"""The data plane's short way through the app: POST routes that only take the request (and
dependencies that only take the request, such as `authenticate`) are called directly.

    app = GatewayApp(...)            # a FastAPI app in every other respect
    app.include_router(...)          # eligible routes are found on the first request

FastAPI's layers around such a route — its telemetry check, server-error, body-limit and
exception middleware, the router's route matching and `solve_dependencies` — cost about a
fifth of the gateway's CPU per proxied request and do nothing for it: the route reads its own
body, answers with a Response, and its errors have handlers. The short way keeps what it
needs: the middlewares added with `add_middleware` (request ids, spans) wrap it, the
app's exception handlers answer what the route raises, and a 500 for anything else.
Everything else (GET routes, path parameters, body models, generator dependencies,
dependency overrides in tests) takes FastAPI's way, unchanged.
"""
from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True, slots=True)
class FastRoute:
    endpoint: Callable[..., Any]
    request_param: str
    dependencies: tuple[tuple[str, Callable[..., Any], str], ...]   # (param, call, its request)

    async def __call__(self, request: Request) -> Any:
        kwargs = {self.request_param: request}
        for name, call, request_param in self.dependencies:
            kwargs[name] = await call(**{request_param: request})
        return await self.endpoint(**kwargs)


def _takes_only_request(d) -> bool:
    return not (d.path_params or d.query_params or d.header_params or d.cookie_params
                or d.body_params or d.websocket_param_name or d.http_connection_param_name
                or d.response_param_name or d.background_tasks_param_name
                or d.security_scopes_param_name)


def _answers_response(route) -> bool:
    """Only a route that builds its own Response: nothing is left to serialise or validate."""
    try:
        answer = typing.get_type_hints(route.endpoint).get("return")
    except Exception:   # an annotation that does not resolve: FastAPI's way
        return False
    return inspect.isclass(answer) and issubclass(answer, Response)


def fast_route(route) -> FastRoute | None:
    """The direct call for `route`, or None when it needs FastAPI's machinery."""
    if not isinstance(route, APIRoute) or route.methods != {"POST"} or route.param_convertors:
        return None
    d = route.dependant
    if not (_takes_only_request(d) and d.request_param_name
            and inspect.iscoroutinefunction(route.endpoint) and _answers_response(route)):
        return None
    deps = []
    for sub in d.dependencies:
        if (sub.dependencies or not _takes_only_request(sub) or not sub.request_param_name
                or not sub.name or not inspect.iscoroutinefunction(sub.call)):
            return None
        deps.append((sub.name, sub.call, sub.request_param_name))
    return FastRoute(route.endpoint, d.request_param_name, tuple(deps))


def _routes(router):
    """Every route of `router`, including those of routers included with no prefix or
    dependencies of their own (FastAPI >= 0.165 keeps included routers as one entry)."""
    for route in router.routes:
        included = getattr(route, "original_router", None)
        context = getattr(route, "include_context", None)
        if included is None:
            yield route
        elif context is not None and not context.prefix and not context.dependencies:
            yield from _routes(included)


FAST_ROUTE = "inferplane.fast_route"   # scope key: the FastRoute the short way serves


class GatewayApp(FastAPI):
    """FastAPI, with the eligible POST routes served the short way (see the module doc)."""

    _fast: dict[str, FastRoute] | None = None
    _fast_stack = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" \
                and not self.dependency_overrides:
            fast = (self._fast if self._fast is not None else self._find_fast()).get(
                scope["path"])
            if fast is not None:
                scope["app"] = self
                scope[FAST_ROUTE] = fast
                await self._fast_stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _find_fast(self) -> dict[str, FastRoute]:
        """Built on the first POST: every router and middleware is added by then."""
        found: dict[str, FastRoute | None] = {}
        for route in _routes(self.router):   # the first POST route of a path is what serves it
            if isinstance(route, APIRoute) and "POST" in route.methods:
                found.setdefault(route.path, fast_route(route))
        stack = self._serve_fast
        for cls, args, kwargs in reversed(self.user_middleware):   # nested as FastAPI does
            stack = cls(stack, *args, **kwargs)
        self._fast_stack = stack
        self._fast = {path: fast for path, fast in found.items() if fast is not None}
        return self._fast

    async def _serve_fast(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await scope[FAST_ROUTE](request)
        except Exception as exc:   # answered by the app's handlers (Exception's: the 500)
            handler = self._handler_for(exc)
            if handler is None:
                raise
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception):
        handlers = self.exception_handlers
        for cls in type(exc).__mro__:
            if cls in handlers:
                return handlers[cls]
        return None
