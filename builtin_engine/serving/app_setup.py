"""What both engine apps share (generation: serving/server.py, embeddings: embeddings/server.py).

    app = FastAPI(title=..., docs_url=None, redoc_url=None, **NATIVE_TRACING_OFF)
    install_error_handlers(app)      # EngineError and invalid bodies in OpenAI's shape
    # a route this model does not serve answers a clear 400:
    app.include_router(unsupported_router("/v1/embeddings", "embeddings", served_name))
"""
from __future__ import annotations

import inspect

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError

from builtin_engine.errors import EngineError, error_response
from common.error_codes import ErrorCode

# Our own spans continue the gateway's trace; FastAPI's built-in ones would start another.
NATIVE_TRACING_OFF = {"telemetry": {"tracing": False}} \
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}


def install_error_handlers(app: FastAPI) -> None:
    """EngineError and invalid bodies answered in OpenAI's error shape (400, never 422)."""
    @app.exception_handler(EngineError)
    async def _engine_error(_: Request, exc: EngineError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        err = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        message = err.get("msg", "invalid request").removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            loc, message = [], "We could not parse the JSON body of your request."
        return error_response(400, f"{'.'.join(loc) + ': ' if loc else ''}{message}",
                              param=".".join(loc) or None)


def unsupported_router(path: str, what: str, served_name: str) -> APIRouter:
    """POST `path` answered with an OpenAI-shaped 400: this model does not serve `what`."""
    router = APIRouter()

    @router.post(path, include_in_schema=False)
    async def _unsupported():
        raise EngineError(400, f"The model `{served_name}` does not support {what}.",
                          code=ErrorCode.UNSUPPORTED_ENDPOINT)

    return router
