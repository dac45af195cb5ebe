"""Registry errors carry what an API layer needs to answer precisely (param, code)."""

from __future__ import annotations


class RegistryError(Exception):
    code = "registry_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code:
            self.code = code


class NotFoundError(RegistryError):
    code = "not_found"


class ConflictError(RegistryError):
    """Duplicate name, or a write based on a stale row version."""

    code = "conflict"


class InvalidError(RegistryError):
    """The request is well-formed but inconsistent with the registry (e.g. unknown base version)."""

    code = "invalid_value"


def check_row_version(row, expected: int | None, what: str) -> None:
    if expected is not None and row.row_version != expected:
        raise ConflictError(
            f"{what} was modified concurrently: row_version is {row.row_version}, "
            f"the request expected {expected}; re-read and retry",
            code="row_version_mismatch")
