"""The one place where registry and database errors become precise admin API answers.

    install_db_error_handlers(app)   # after common.errors.install_error_handlers(app)

Request bodies are bounded so that these are the exception, not the rule; what still reaches
the database and is refused there answers 4xx with the database's reason, never 500:

    RegistryError  an InferplaneError answered by common.errors' handler: NotFound 404,
                   Conflict 409, Invalid 422 (well-formed, inconsistent with the registry:
                   unknown base version, a model falling back to itself, ...)
    StaleDataError 409 (a concurrent write won)
    IntegrityError 409 (a race past the existence checks: duplicate or dangling reference)
    DataError, OverflowError, a value the driver cannot bind   400 (out of range, bad bytes)
    OperationalError  503 + Retry-After (database locked or unreachable)
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError
from sqlalchemy.orm.exc import StaleDataError

from common.error_codes import ErrorCode
from common.errors import OpenAIError

log = logging.getLogger("inferplane.admin")


def _stale(_: Request, exc: StaleDataError) -> Response:
    return OpenAIError(409, "the resource was modified concurrently; re-read and retry",
                       type="conflict_error", code=ErrorCode.ROW_VERSION_MISMATCH).response()


def _integrity(_: Request, exc: IntegrityError) -> Response:
    # Reached when two requests race past the existence checks; the database decides.
    log.info("integrity conflict: %s", exc.orig)
    return OpenAIError(409, "conflicting concurrent change (duplicate or dangling reference); "
                       "re-read and retry", type="conflict_error", code=ErrorCode.CONFLICT).response()


def _operational(_: Request, exc: OperationalError) -> Response:
    log.warning("registry database error: %s", exc.orig)
    return OpenAIError(503, "registry database unavailable; retry shortly",
                       code=ErrorCode.DATABASE_UNAVAILABLE, headers={"Retry-After": "1"}).response()


def _unstorable(_: Request, exc: Exception) -> Response:
    """A value the database (or its driver) cannot hold: out of range, NUL bytes, ..."""
    reason = getattr(exc, "orig", None) or exc
    log.info("value refused by the database: %s", reason)
    first_line = str(reason).strip().splitlines()[0] if str(reason).strip() else "invalid"
    return OpenAIError(400, f"a value cannot be stored: {first_line[:200]}",
                       code=ErrorCode.INVALID_VALUE).response()


def _statement(request: Request, exc: StatementError) -> Response:
    # SQLAlchemy wraps what the driver raised while binding parameters (OverflowError,
    # ValueError); other statement errors are the server's fault and stay 500s.
    if isinstance(exc.orig, (OverflowError, ValueError, TypeError)):
        return _unstorable(request, exc)
    log.error("registry statement failed", exc_info=exc)
    return OpenAIError(500, "internal error", code=ErrorCode.INTERNAL_ERROR).response()


def install_db_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StaleDataError, _stale)
    app.add_exception_handler(IntegrityError, _integrity)
    app.add_exception_handler(OperationalError, _operational)
    app.add_exception_handler(DataError, _unstorable)
    app.add_exception_handler(OverflowError, _unstorable)
    app.add_exception_handler(StatementError, _statement)


__all__ = ["install_db_error_handlers"]
