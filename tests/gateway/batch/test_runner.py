"""gateway.batch.runner: a line whose handling fails in a way the request path does not
answer is recorded as failed with a 500, never dropped from the batch's counts."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import orjson
import pytest
from starlette.responses import Response

from gateway.batch import runner as batch_runner
from gateway.batch.runner import BatchRunner
from gateway.batch.store import BatchStore
from gateway.settings import BatchSettings
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.orm.batches import Batch


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'batches.db'}"
    upgrade(url)
    sessions = make_session_factory(url)
    yield BatchStore(sessions)
    sessions.kw["bind"].dispose()


def _line(custom_id: str) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": [{"role": "user",
                                                              "content": custom_id}]}})


def test_a_line_that_raises_fails_with_a_500_and_the_rest_complete(store, monkeypatch):
    async def handle_body(app, raw, principal, endpoint):
        if b"breaks" in raw:
            raise RuntimeError("a fault past the pipeline's handlers")
        return Response(b'{"choices": []}', media_type="application/json")

    monkeypatch.setattr(batch_runner, "handle_body", handle_body)
    app = SimpleNamespace(state=SimpleNamespace(gateway=SimpleNamespace(snapshot=object())))
    principal = {"key_id": "jwt:alice", "name": "alice", "team": "a", "role": "user",
                 "models": None}

    async def scenario():
        await store.add_file("file-in", "team:a", "batch", "in.jsonl",
                             b"\n".join([_line("fine"), _line("breaks")]))
        await store.add_batch(Batch(
            id="batch_1", owner="team:a", principal=principal,
            endpoint="/v1/chat/completions", input_file_id="file-in", completion_window="24h",
            status="validating", metadata_=None, errors=None, total=0, completed=0, failed=0,
            created_at=1, expires_at=2_000_000_000))
        assert await BatchRunner(app, store, BatchSettings()).run_one()
        batch = await store.get_batch("batch_1")
        errors = await store.get_file(batch.error_file_id, "team:a", content=True)
        return batch, [orjson.loads(x) for x in errors.content.splitlines()]

    batch, errors = asyncio.run(scenario())
    assert batch.status == "completed"
    assert (batch.total, batch.completed, batch.failed) == (2, 1, 1)
    (error,) = errors
    assert error["custom_id"] == "breaks" and error["response"]["status_code"] == 500
