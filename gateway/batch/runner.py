"""Runs batches: each gateway process has one runner; a lease in the registry decides which
process runs a batch, and another takes it over when the lease lapses (its process died).

    runner = BatchRunner(app, store, settings.batches)    # the gateway app, gateway.batch.store
    task = asyncio.create_task(runner.run())              # in the gateway's lifespan

A batch's lines go through the request pipeline (`pipeline.handle_body`) as the batch owner's
key, at `batch` priority, at most `concurrency` at a time: authentication aside they are
interactive requests (limits, admission, routing, retries, fallbacks, usage rows), and the
admission queue serves interactive traffic ahead of them. Each finished line is stored at
once, so a runner taking a batch over skips what was done:

    validating → in_progress → finalizing → completed
                     │ cancel → cancelling → cancelled      (lines in flight finish first)
                     └ past expires_at → expired            (unfinished lines: error file)
    validating → failed                                     (no input file, no lines, too many)
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time

import orjson

from common.auth.authenticate import principal_of_key
from common.auth.principal import Principal
from common.error_codes import ErrorCode
from common.errors import InferplaneError, OpenAIError
from common.request_context import bound_request_id
from common.vocabulary import Priority
from gateway.apis.chat.endpoint import CHAT_COMPLETIONS
from gateway.apis.completions.endpoint import COMPLETIONS
from gateway.apis.embeddings.endpoint import EMBEDDINGS
from gateway.batch.lines import (BatchLine, LineFailure, error_record, failure_record,
                                 parse_input, success_record)
from gateway.batch.objects import new_id
from gateway.batch.store import BatchStore
from gateway.request_path.pipeline import handle_body
from gateway.settings import BatchSettings
from registry.orm.batches import Batch, StoredFile

log = logging.getLogger("inferplane.gateway.batch")
ENDPOINTS = {e.path: e for e in (CHAT_COMPLETIONS, COMPLETIONS, EMBEDDINGS)}
RETRYABLE = frozenset({429, 502, 503, 504})
MAX_BACKOFF_S = 30.0


class BatchRunner:
    def __init__(self, app, store: BatchStore, settings: BatchSettings):
        self.app, self.store, self.settings = app, store, settings
        self.runner_id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"

    async def run(self) -> None:
        """Claim a free batch and run it, one at a time, for ever."""
        while True:
            try:
                ran = await self.run_one()
            except Exception:   # the database is away, a bug: try again after a pause
                log.exception("batch runner failed; retrying")
                ran = False
            if not ran:
                await asyncio.sleep(self.settings.poll_s)

    async def run_one(self) -> bool:
        """Run one claimable batch to its end (or until its lease is lost); False if none."""
        for batch_id in await self.store.claimable():
            if await self.store.claim(batch_id, self.runner_id, self.settings.lease_s):
                await BatchRun(self, batch_id).run()
                return True
        return False


class BatchRun:
    """One claim of one batch, from its current state to a final one."""

    def __init__(self, runner: BatchRunner, batch_id: str):
        self.runner, self.store, self.settings = runner, runner.store, runner.settings
        self.batch_id, self.me = batch_id, runner.runner_id
        self.stop: str | None = None        # lost | cancelling | expired
        self.inflight: set[asyncio.Task] = set()
        self._principal: tuple[object, Principal] | None = None

    async def run(self) -> None:
        batch = await self.store.get_batch(self.batch_id)
        holder = asyncio.create_task(self._hold(batch.expires_at))
        finished = False
        try:
            finished = await self._run(batch)
        finally:
            holder.cancel()
            for task in self.inflight:
                task.cancel()
            if not finished and self.stop != "lost":   # stopped (shutdown): free it at once
                await asyncio.shield(self.store.update_held(
                    self.batch_id, self.me, claimed_by=None, lease_expires_at=None))

    async def _run(self, batch: Batch) -> bool:
        if batch.status in ("cancelling", "finalizing"):
            return await self._finish(batch, "cancelled" if batch.status == "cancelling"
                                      else "completed")
        parsed = await self._read_input(batch)
        if parsed is None:
            return True
        lines, failures = parsed
        if batch.status == "validating" and not await self.store.update_held(
                self.batch_id, self.me, status="in_progress", in_progress_at=int(time.time()),
                total=len(lines) + len(failures)):
            return False
        done = await self.store.finished_lines(self.batch_id)
        for failure in failures:
            if failure.number not in done:
                await self._save(failure.number, False, error_record(failure))
        await self._run_lines(batch, [line for line in lines if line.number not in done])
        if self.stop == "lost":
            return False
        if self.stop == "expired":
            return await self._finish(batch, "expired", lines)
        if self.stop == "cancelling":
            return await self._finish(batch, "cancelled")
        if not await self.store.update_held(self.batch_id, self.me, status="finalizing",
                                            finalizing_at=int(time.time())):
            return False
        return await self._finish(batch, "completed")

    async def _read_input(self, batch: Batch):
        """(lines, failures) of the input file; None after failing the batch (nothing to run)."""
        stored = await self.store.get_file(batch.input_file_id, None, content=True)
        if stored is None:
            return await self._fail(batch, ErrorCode.INVALID_FILE,
                                    "the input file no longer exists")
        lines, failures = parse_input(stored.content, batch.endpoint)
        count = len(lines) + len(failures)
        if count == 0:
            return await self._fail(batch, ErrorCode.EMPTY_FILE, "the input file has no lines")
        if count > self.settings.max_lines:
            return await self._fail(batch, ErrorCode.TOO_MANY_LINES,
                                    f"the input file has {count} lines; at most "
                                    f"{self.settings.max_lines} are allowed in a batch")
        return lines, failures

    async def _fail(self, batch: Batch, code: str, message: str) -> None:
        errors = {"object": "list", "data": [{"code": code, "message": message, "param": None,
                                              "line": None}]}
        await self.store.finish(self.batch_id, self.me, [], status="failed", errors=errors,
                                failed_at=int(time.time()))
        log.info("batch failed validation", extra={"batch_id": batch.id, "code": code})
        return None

    async def _hold(self, expires_at: int) -> None:
        """Renew the lease every third of it; note a cancel, an expiry or a lost lease."""
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)
            batch = await self._renew()
            if batch is None:
                self.stop = "lost"
                for task in self.inflight:   # their results could not be stored anyway
                    task.cancel()
                return
            if batch.status == "cancelling":
                self.stop = "cancelling"
            elif time.time() >= expires_at:
                self.stop = "expired"

    async def _renew(self):
        try:
            return await self.store.renew(self.batch_id, self.me, self.settings.lease_s)
        except Exception:   # the database is away for a moment: the lease may still hold
            log.warning("batch lease renewal failed", exc_info=True)
            return _Unknown

    async def _run_lines(self, batch: Batch, lines: list[BatchLine]) -> None:
        slots = asyncio.Semaphore(self.settings.concurrency)
        endpoint = ENDPOINTS[batch.endpoint]

        async def one(line: BatchLine) -> None:
            try:
                ok, record = await self._call(batch, endpoint, line)
                await self._save(line.number, ok, record)
            finally:
                slots.release()

        for line in lines:
            await slots.acquire()
            if self.stop is not None:
                slots.release()
                break
            task = asyncio.create_task(one(line))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
        while self.inflight:
            await asyncio.gather(*list(self.inflight), return_exceptions=True)

    async def _call(self, batch: Batch, endpoint, line: BatchLine) -> tuple[bool, str]:
        raw = orjson.dumps(line.body)
        app = self.runner.app
        for attempt in range(self.settings.max_attempts):
            request_id = new_id("req_")
            with bound_request_id(request_id):
                try:
                    response = await handle_body(app, raw, self._principal_for(batch), endpoint)
                except OpenAIError as exc:   # the batch's key was revoked or deleted
                    response = endpoint.error_response(exc)
                except Exception:   # a fault past the request path's own handlers: the line
                    # fails with a 500 in its record instead of vanishing from the counts
                    log.exception("batch %s line %d failed unexpectedly", batch.id,
                                  line.number)
                    response = endpoint.error_response(InferplaneError("internal error"))
            status = response.status_code
            if status not in RETRYABLE or attempt + 1 == self.settings.max_attempts \
                    or self.stop is not None:
                break
            await asyncio.sleep(_backoff(response, attempt))
        body = _json_or_text(response.body)
        if status < 300:
            return True, success_record(line.custom_id, request_id, status, body)
        return False, failure_record(line.custom_id, request_id, status, body)

    def _principal_for(self, batch: Batch) -> Principal:
        """The owner's principal as the snapshot has it now (a revoked key stops its batch's
        lines), at batch priority. A JWT principal is as it was when the batch was made."""
        snapshot = self.runner.app.state.gateway.snapshot
        if self._principal is not None and self._principal[0] is snapshot:
            return self._principal[1]
        stored = dict(batch.principal)
        key_id = stored["key_id"]
        if key_id.startswith("jwt:"):
            models = stored.get("models")
            principal = Principal(**{**stored, "models": None if models is None
                                     else tuple(models)})
        else:
            key = next((k for k in snapshot.keys.values() if str(k.key_id) == key_id), None)
            if key is None or key.revoked or (key.expires_at and key.expires_at <= time.time()):
                raise OpenAIError(401, "the batch's API key was revoked, has expired or no "
                                  "longer exists", code=ErrorCode.INVALID_API_KEY)
            principal = principal_of_key(key)
        principal = dataclasses.replace(principal, priority=Priority.BATCH)
        self._principal = (snapshot, principal)
        return principal

    async def _save(self, number: int, ok: bool, record: str) -> None:
        if not await self.store.save_result(self.batch_id, self.me, number, ok, record):
            self.stop = "lost"

    async def _finish(self, batch: Batch, status: str, lines: list[BatchLine] = ()) -> bool:
        """Write the output and error files and the final status in one transaction."""
        results = await self.store.results(self.batch_id)
        done = {number for number, _, _ in results}
        out = [record for _, ok, record in results if ok]
        errors = [record for _, ok, record in results if not ok]
        if status == "expired":
            errors += [error_record(LineFailure(line.number, line.custom_id,
                                                ErrorCode.BATCH_EXPIRED,
                                                "this line did not run within the batch's "
                                                "completion window"))
                       for line in lines if line.number not in done]
        now = int(time.time())
        files = [f for f in (self._file(batch, "output", out), self._file(batch, "error", errors))
                 if f is not None]
        by_kind = {f.filename.rsplit("_", 1)[1]: f.id for f in files}
        finished = await self.store.finish(
            self.batch_id, self.me, files, status=status, completed=len(out), failed=len(errors),
            output_file_id=by_kind.get("output.jsonl"), error_file_id=by_kind.get("error.jsonl"),
            **{f"{status}_at": now})
        if finished:
            log.info("batch finished", extra={"batch_id": batch.id, "status": status,
                                              "completed": len(out), "failed": len(errors)})
        return finished

    @staticmethod
    def _file(batch: Batch, kind: str, records: list[str]) -> StoredFile | None:
        if not records:
            return None
        content = ("\n".join(records) + "\n").encode()
        return StoredFile(id=new_id("file-"), owner=batch.owner, purpose="batch_output",
                          filename=f"{batch.id}_{kind}.jsonl", bytes=len(content),
                          created_at=int(time.time()), content=content)


class _UnknownBatch:
    """A renewal that could not reach the database: nothing is known to have changed."""
    status = None


_Unknown = _UnknownBatch()


def _backoff(response, attempt: int) -> float:
    retry_after = response.headers.get("retry-after")
    try:
        seconds = float(retry_after) if retry_after else 2.0 ** attempt
    except ValueError:
        seconds = 2.0 ** attempt
    return min(MAX_BACKOFF_S, max(0.1, seconds))


def _json_or_text(raw: bytes):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")


__all__ = ["ENDPOINTS", "BatchRun", "BatchRunner"]
