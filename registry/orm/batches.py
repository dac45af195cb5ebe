"""OpenAI Files and Batches: uploaded files (their bytes in the row), batches and each batch
line's result as it finished.

Times a client reads (`created_at`, `completed_at`, ...) are unix seconds, as the OpenAI API
gives them. `seq` orders the lists (newest first, `after` cursors); `id` is the public id.
A batch is run by the one gateway process holding its lease (`claimed_by` until
`lease_expires_at`); `batch_results` has one row per finished line, so a runner that takes a
batch over skips what is done and a line is never written twice.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text,
                        UniqueConstraint)
from sqlalchemy.orm import Mapped, mapped_column

from registry.orm.base import Base

BATCH_STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired",
                  "cancelling", "cancelled")
ACTIVE_BATCH_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")


class StoredFile(Base):
    __tablename__ = "files"
    __table_args__ = (Index("ix_files_owner_seq", "owner", "seq"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    owner: Mapped[str] = mapped_column(String(250))   # "team:<name>" or "key:<id>"
    purpose: Mapped[str] = mapped_column(String(40))
    filename: Mapped[str] = mapped_column(String(500))
    bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)  # read on demand


class Batch(Base):
    __tablename__ = "batches"
    __table_args__ = (Index("ix_batches_owner_seq", "owner", "seq"),
                      Index("ix_batches_status", "status"))

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    owner: Mapped[str] = mapped_column(String(250))
    principal: Mapped[dict[str, Any]]   # who runs the lines (refreshed from the snapshot)
    endpoint: Mapped[str] = mapped_column(String(100))
    input_file_id: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata")
    errors: Mapped[dict[str, Any] | None]
    output_file_id: Mapped[str | None] = mapped_column(String(64))
    error_file_id: Mapped[str | None] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer, default=0)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[int] = mapped_column(Integer)
    in_progress_at: Mapped[int | None] = mapped_column(Integer)
    finalizing_at: Mapped[int | None] = mapped_column(Integer)
    completed_at: Mapped[int | None] = mapped_column(Integer)
    failed_at: Mapped[int | None] = mapped_column(Integer)
    expired_at: Mapped[int | None] = mapped_column(Integer)
    cancelling_at: Mapped[int | None] = mapped_column(Integer)
    cancelled_at: Mapped[int | None] = mapped_column(Integer)
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)


class BatchResult(Base):
    """One finished line: `ok` lines go to the output file, the others to the error file."""
    __tablename__ = "batch_results"
    __table_args__ = (UniqueConstraint("batch_id", "line"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch_id: Mapped[str] = mapped_column(String(64), ForeignKey("batches.id",
                                                                 ondelete="CASCADE"))
    line: Mapped[int] = mapped_column(Integer)    # 1-based line number in the input file
    ok: Mapped[bool] = mapped_column(Boolean)
    record: Mapped[str] = mapped_column(Text)     # the output or error file's JSON line


__all__ = ["ACTIVE_BATCH_STATUSES", "BATCH_STATUSES", "Batch", "BatchResult", "StoredFile"]
