"""What the Files and Batch APIs answer: OpenAI's `file`, `batch` and `list` objects, the ids
they carry, and who owns a row.

    owner_of(principal)          # "team:<team>" (every key of a team shares its files), else "key:<id>"
    file_object(row)             # {"id": "file-...", "object": "file", ...}
    batch_object(row)            # {"id": "batch_...", "object": "batch", "request_counts": ...}
    page(objects, has_more)      # {"object": "list", "data": [...], "first_id", "last_id", "has_more"}
"""
from __future__ import annotations

import os

from common.auth.principal import Principal


def new_id(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


def owner_of(principal: Principal) -> str:
    return f"team:{principal.team}" if principal.team else f"key:{principal.key_id}"


def file_object(row) -> dict:
    return {"id": row.id, "object": "file", "bytes": row.bytes, "created_at": row.created_at,
            "filename": row.filename, "purpose": row.purpose, "status": "processed",
            "status_details": None, "expires_at": None}


TIMES = ("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
         "failed_at", "expired_at", "cancelling_at", "cancelled_at")


def batch_object(row) -> dict:
    return {"id": row.id, "object": "batch", "endpoint": row.endpoint, "errors": row.errors,
            "input_file_id": row.input_file_id, "completion_window": row.completion_window,
            "status": row.status, "output_file_id": row.output_file_id,
            "error_file_id": row.error_file_id, **{t: getattr(row, t) for t in TIMES},
            "request_counts": {"total": row.total, "completed": row.completed,
                               "failed": row.failed},
            "metadata": row.metadata_}


def page(objects: list[dict], has_more: bool) -> dict:
    return {"object": "list", "data": objects,
            "first_id": objects[0]["id"] if objects else None,
            "last_id": objects[-1]["id"] if objects else None, "has_more": has_more}


__all__ = ["batch_object", "file_object", "new_id", "owner_of", "page"]
