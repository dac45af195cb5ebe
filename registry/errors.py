"""Registry refusals: domain errors carrying what the API answers (status, param, code).

    raise NotFoundError(f"model '{name}' not found", param="name")     # -> 404 not_found
"""

from __future__ import annotations

from common.error_codes import ErrorCode
from common.errors import InferplaneError


class RegistryError(InferplaneError):
    status, code = 400, ErrorCode.REGISTRY_ERROR


class NotFoundError(RegistryError):
    status, code = 404, ErrorCode.NOT_FOUND


class ConflictError(RegistryError):
    """Duplicate name, or a write based on a stale row version."""

    status, code, type = 409, ErrorCode.CONFLICT, "conflict_error"


class InvalidError(RegistryError):
    """The request is well-formed but inconsistent with the registry (e.g. unknown base version)."""

    status, code = 422, ErrorCode.INVALID_VALUE


def check_row_version(row, expected: int | None, what: str) -> None:
    if expected is not None and row.row_version != expected:
        raise ConflictError(
            f"{what} was modified concurrently: row_version is {row.row_version}, "
            f"the request expected {expected}; re-read and retry",
            code=ErrorCode.ROW_VERSION_MISMATCH)
