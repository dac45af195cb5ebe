"""The OpenAI Batch API: POST /v1/batches, GET /v1/batches (`after`/`limit` pages, newest
first), GET /v1/batches/{batch_id}, POST /v1/batches/{batch_id}/cancel.

A batch is a row in the registry database; a gateway process's runner (gateway.batch.runner)
claims it and runs its lines through the request pipeline at batch priority. Batches belong
to the caller's team (else key), as files do: anyone else reads 404.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from common.auth.authenticate import AuthPrincipal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.apis.files.router import Store, not_found
from gateway.batch.objects import batch_object, new_id, owner_of, page
from registry.orm.batches import Batch

router = APIRouter(prefix="/v1", tags=["openai"])
COMPLETION_WINDOW_S = {"24h": 24 * 3600}


class CreateBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(min_length=1, max_length=64)
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        # OpenAI's bounds: 16 pairs, keys up to 64 characters, values up to 512
        if value is not None and (len(value) > 16 or any(len(k) > 64 or len(v) > 512
                                                          for k, v in value.items())):
            raise ValueError("at most 16 pairs, keys up to 64 characters, values up to 512")
        return value


def _batch_not_found(batch_id: str) -> OpenAIError:
    return OpenAIError(404, f"No batch found with id '{batch_id}'.", param="batch_id",
                       code=ErrorCode.NOT_FOUND)


@router.post("/batches")
async def create_batch(spec: CreateBatch, principal: AuthPrincipal, store: Store) -> dict:
    owner = owner_of(principal)
    source = await store.get_file(spec.input_file_id, owner)
    if source is None:
        raise not_found(spec.input_file_id, param="input_file_id")
    if source.purpose != "batch":
        raise OpenAIError(400, f"file '{source.id}' has purpose '{source.purpose}'; a batch's "
                          "input file needs purpose 'batch'", param="input_file_id",
                          code=ErrorCode.INVALID_FILE)
    now = int(time.time())
    stored = dataclasses.asdict(principal)
    batch = await store.add_batch(Batch(
        id=new_id("batch_"), owner=owner, principal=stored, endpoint=spec.endpoint,
        input_file_id=spec.input_file_id, completion_window=spec.completion_window,
        status="validating", metadata_=spec.metadata, errors=None, total=0, completed=0,
        failed=0, created_at=now, expires_at=now + COMPLETION_WINDOW_S[spec.completion_window]))
    return batch_object(batch)


@router.get("/batches")
async def list_batches(principal: AuthPrincipal, store: Store, after: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict:
    rows, has_more = await store.list_batches(owner_of(principal), after, limit)
    return page([batch_object(row) for row in rows], has_more)


@router.get("/batches/{batch_id}")
async def retrieve_batch(batch_id: str, principal: AuthPrincipal, store: Store) -> dict:
    row = await store.get_batch(batch_id, owner_of(principal))
    if row is None:
        raise _batch_not_found(batch_id)
    return batch_object(row)


@router.post("/batches/{batch_id}/cancel",
             responses={409: {"description": "The batch already ended"}})
async def cancel_batch(batch_id: str, principal: AuthPrincipal, store: Store) -> dict:
    """validating / in_progress → cancelling; the runner lets the lines in flight finish,
    writes the files and ends it as cancelled. Cancelling again answers the batch as it is."""
    row = await store.request_cancel(batch_id, owner_of(principal))
    if row is None:
        raise _batch_not_found(batch_id)
    if row.status not in ("cancelling", "cancelled"):
        raise OpenAIError(409, f"batch '{batch_id}' is {row.status}: it cannot be cancelled",
                          code=ErrorCode.INVALID_STATE)
    return batch_object(row)
