"""Every error leaves the gateway in OpenAI's shape: {"error": {message, type, param, code}}.

FastAPI's own handlers (validation, HTTPException, unhandled exceptions) are replaced so no
route, /v1 or /admin, ever answers with the default {"detail": ...}.

Domain errors (queue full, breaker open, no backend, a registry or tier refusal, ...) subclass
`InferplaneError` in their own modules and are answered by its one handler here.
"""
from __future__ import annotations

import logging
import math
from typing import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.error_codes import ErrorCode

log = logging.getLogger("inferplane.gateway")

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


def _type_for(status: int) -> str:
    return _TYPE_BY_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")


class InferplaneError(Exception):
    """Base of every domain error; the edge handler answers it in OpenAI's error shape.

    A subclass states its HTTP status and code once, as class attributes; a raise adds the
    message and, where it helps the client, the offending parameter or a Retry-After::

        class QueueFull(InferplaneError):
            status, code = 429, ErrorCode.QUEUE_FULL

        raise QueueFull(f"too many queued requests for '{model}'", retry_after=2.5)
        raise InvalidError("unknown base version", param="base_version")   # 422

    Any keyword overrides the class default for one raise (status, code, type, param, headers).
    Domain code raises these and never builds HTTP responses: `install_error_handlers` maps
    every InferplaneError to `response()` in one handler.
    """

    status: int = 500
    code: str | None = ErrorCode.INTERNAL_ERROR
    type: str | None = None            # None: derived from status (_TYPE_BY_STATUS)

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 param: str | None = None, type: str | None = None,
                 headers: Mapping[str, str] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.type = type or self.type or _type_for(self.status)
        self.param = param
        self.headers = dict(headers or {})
        self.retry_after = retry_after
        if retry_after is not None:  # whole seconds, at least 1: "0" would invite a hot loop
            self.headers.setdefault("retry-after", str(max(1, math.ceil(retry_after))))

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> Response:
        return Response(orjson.dumps(self.body()), status_code=self.status,
                        headers=self.headers, media_type="application/json")


class OpenAIError(InferplaneError):
    """An error whose status is chosen where it is raised (validation, HTTP, upstream)::

        raise OpenAIError(400, "messages: must not be empty", param="messages")
    """

    code = None

    def __init__(self, status: int, message: str, *, type: str | None = None,
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message, status=status, code=code, param=param, type=type,
                         headers=headers)


def _upstream_type(value, status: int) -> str | None:
    # vLLM names the exception class ("BadRequestError", "NotFoundError"); OpenAI's types are
    # snake_case ("invalid_request_error"): anything else is replaced by the status's type.
    if isinstance(value, str) and value.islower():
        return value
    return _type_for(status) if value is not None else None


def error_from_upstream(status: int, body: dict | None) -> OpenAIError:
    """Normalise an engine's error body (vLLM, TGI, FastAPI shapes) into an OpenAIError."""
    body = body or {}
    inner = body.get("error")
    if isinstance(inner, dict):
        return OpenAIError(status, str(inner.get("message") or "upstream error"),
                           type=_upstream_type(inner.get("type"), status),
                           param=inner.get("param"), code=_code(inner.get("code")))
    message = body.get("message") or inner or body.get("detail") or "upstream error"
    if not isinstance(message, str):
        message = orjson.dumps(message).decode()
    return OpenAIError(status, message, type=body.get("type") or body.get("error_type"),
                       param=body.get("param"), code=_code(body.get("code")))


def _code(value) -> str | None:
    return None if value is None else str(value)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    param = ".".join(loc) or None
    message = str(first.get("msg")).replace("Value error, ", "")
    if param and not message.startswith(param):  # a validator may name the place itself
        message = f"{param}: {message}"
    return message, param


def _validation_status(exc: RequestValidationError) -> int:
    """400 when the request does not match the published schema; 422 when it does but a rule
    the schema cannot express (a cross-field check, a JSON value no reader could serialise)
    refuses it: such rules raise ValueError in validators, which pydantic types value_error."""
    errors = exc.errors()
    return 422 if errors and all(e.get("type") == "value_error" for e in errors) else 400


def _allowed_methods(request: Request) -> str:
    """Every method of every route on this path (Starlette names only the first route's)."""
    from starlette.routing import Match

    from common.api_routes import api_routes

    scope = {**request.scope, "method": "\0"}  # no route has it: a path match is PARTIAL
    methods: set[str] = set()
    for route in [*api_routes(request.app), *request.app.router.routes]:
        if getattr(route, "methods", None) and route.matches(scope)[0] is Match.PARTIAL:
            methods |= set(route.methods)
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InferplaneError)  # every domain error, whatever its module
    async def _domain_error(_: Request, exc: InferplaneError) -> Response:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        message, param = _validation_message(exc)
        status = _validation_status(exc)
        return OpenAIError(status, message, param=param,
                           code=ErrorCode.INVALID_REQUEST if status == 400 else "invalid_value"
                           ).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = exc.detail if isinstance(exc.detail, str) else orjson.dumps(exc.detail).decode()
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
        return OpenAIError(exc.status_code, message, headers=headers).response()

    @app.exception_handler(Exception)
    async def _unhandled(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error in request", exc_info=exc)
        return OpenAIError(500, "internal error", code=ErrorCode.INTERNAL_ERROR).response()
