"""The OpenAI Files API: POST /v1/files (multipart: `file`, `purpose`), GET /v1/files,
GET and DELETE /v1/files/{file_id}, GET /v1/files/{file_id}/content.

Files live in the registry database (gateway.batch.store), so every gateway process sees
them. They belong to the caller's team (every key of the team), else to the key: anyone
else reads 404, as if the file did not exist. An upload over `gateway.batches.max_file_bytes`
is a 413; a `batch` file must be UTF-8 text (its lines are checked when a batch runs it,
each bad line failing alone with its line number).
"""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from common.auth.authenticate import AuthPrincipal
from common.error_codes import ErrorCode
from common.errors import OpenAIError
from gateway.batch.objects import file_object, new_id, owner_of, page
from gateway.batch.store import BatchStore

router = APIRouter(prefix="/v1", tags=["openai"])
PURPOSES = frozenset({"batch", "batch_output", "assistants", "fine-tune", "vision", "user_data",
                      "evals"})
UPLOAD_PURPOSES = PURPOSES - {"batch_output"}   # output files are the gateway's own
MULTIPART_SLACK = 64 * 1024     # boundaries and the purpose field around the file's bytes


def batch_store(request: Request) -> BatchStore:
    """The app's store of files and batches (the routes are mounted only where it exists)."""
    return request.app.state.batch_store


Store = Annotated[BatchStore, Depends(batch_store)]


def not_found(file_id: str, param: str = "file_id") -> OpenAIError:
    return OpenAIError(404, f"No such File object: {file_id}", param=param,
                       code=ErrorCode.NOT_FOUND)


def _too_large(limit: int) -> OpenAIError:
    return OpenAIError(413, f"the file is over {limit} bytes (gateway.batches.max_file_bytes)",
                       param="file", code=ErrorCode.BODY_TOO_LARGE)


UPLOAD_ERRORS = {400: {"description": "Not multipart, no file, an unknown purpose, an empty "
                              "file, or a batch file that is not UTF-8 text"},
                 413: {"description": "The file is over the size limit"}}
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"],
    "properties": {"file": {"type": "string", "format": "binary"},
                   "purpose": {"type": "string", "enum": sorted(UPLOAD_PURPOSES)}}}}}}}


@router.post("/files", responses=UPLOAD_ERRORS, openapi_extra=UPLOAD_BODY)
async def upload_file(request: Request, principal: AuthPrincipal, store: Store) -> dict:
    limit = request.app.state.gateway.settings.batches.max_file_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
        raise _too_large(limit)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise OpenAIError(400, "upload the file as multipart/form-data with the fields "
                          "'file' and 'purpose'", code=ErrorCode.INVALID_CONTENT_TYPE)
    async with request.form(max_files=1, max_fields=8) as form:
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise OpenAIError(400, "the 'file' field is missing or is not a file", param="file",
                              code=ErrorCode.MISSING_REQUIRED_PARAMETER)
        content = await upload.read(limit + 1)
        filename = upload.filename or "upload"
    if len(content) > limit:
        raise _too_large(limit)
    _check_upload(purpose, filename, content)
    row = await store.add_file(new_id("file-"), owner_of(principal), purpose, filename[:500],
                               content)
    return file_object(row)


def _check_upload(purpose, filename: str, content: bytes) -> None:
    if purpose not in UPLOAD_PURPOSES:
        raise OpenAIError(400, f"purpose must be one of {sorted(UPLOAD_PURPOSES)}",
                          param="purpose", code=ErrorCode.INVALID_VALUE)
    if not content:
        raise OpenAIError(400, "the file is empty", param="file", code=ErrorCode.EMPTY_FILE)
    if purpose == "batch":
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            raise OpenAIError(400, f"'{filename}' is not UTF-8 text: a batch file is JSONL, "
                              "one request per line", param="file",
                              code=ErrorCode.INVALID_FILE) from None


@router.get("/files")
async def list_files(principal: AuthPrincipal, store: Store,
                     purpose: str | None = None, after: str | None = None,
                     limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
                     order: Literal["asc", "desc"] = "desc") -> dict:
    rows, has_more = await store.list_files(owner_of(principal), purpose, after, limit,
                                            newest_first=order == "desc")
    return page([file_object(row) for row in rows], has_more)


@router.get("/files/{file_id}")
async def retrieve_file(file_id: str, principal: AuthPrincipal, store: Store) -> dict:
    row = await store.get_file(file_id, owner_of(principal))
    if row is None:
        raise not_found(file_id)
    return file_object(row)


@router.delete("/files/{file_id}")
async def delete_file(file_id: str, principal: AuthPrincipal, store: Store) -> dict:
    if not await store.delete_file(file_id, owner_of(principal)):
        raise not_found(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


@router.get("/files/{file_id}/content", response_class=Response)
async def file_content(file_id: str, principal: AuthPrincipal, store: Store) -> Response:
    row = await store.get_file(file_id, owner_of(principal), content=True)
    if row is None:
        raise not_found(file_id)
    return Response(row.content, media_type="application/octet-stream")
