"""Rows addressed by a unique `name` (models, teams): one lookup and one create for all."""
from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.error_codes import ErrorCode
from registry.errors import ConflictError, NotFoundError

Row = TypeVar("Row")


def get_named(session: Session, cls: type[Row], name: str, kind: str) -> Row:
    row = session.scalar(select(cls).where(cls.name == name))
    if row is None:
        raise NotFoundError(f"{kind} '{name}' does not exist", param=kind)
    return row


def create_named(session: Session, cls: type[Row], name: str, kind: str, **fields: Any) -> Row:
    if session.scalar(select(cls.id).where(cls.name == name)) is not None:
        raise ConflictError(f"{kind} '{name}' already exists", param="name", code=ErrorCode.ALREADY_EXISTS)
    row = cls(name=name, **fields)
    session.add(row)
    session.flush()
    return row
