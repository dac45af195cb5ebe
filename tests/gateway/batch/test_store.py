"""The batch store on a migrated SQLite file and a PostgreSQL database: tenants see only
their rows, one runner of several holds a batch, a lapsed lease is taken over, a line is
stored and counted once, a runner that lost its lease writes nothing."""
from __future__ import annotations

import asyncio

import pytest

from gateway.batch.store import BatchStore
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.orm.batches import Batch
from tests.registry.databases import any_url  # noqa: F401  (fixture)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(any_url):  # noqa: F811
    upgrade(any_url)
    sessions = make_session_factory(any_url)
    yield BatchStore(sessions, clock=Clock())
    sessions.kw["bind"].dispose()


def _batch(batch_id: str, owner: str = "team:a") -> Batch:
    return Batch(id=batch_id, owner=owner, principal={"key_id": "1"},
                 endpoint="/v1/chat/completions", input_file_id="file-x",
                 completion_window="24h", status="validating", metadata_=None, errors=None,
                 total=0, completed=0, failed=0, created_at=1, expires_at=2)


def run(coro):
    return asyncio.run(coro)


def test_files_belong_to_their_owner_and_page_newest_first(store):
    for i in range(3):
        run(store.add_file(f"file-{i}", "team:a", "batch", f"in{i}.jsonl", b"{}\n"))
    run(store.add_file("file-b", "team:b", "batch", "other.jsonl", b"{}\n"))
    assert run(store.get_file("file-b", "team:a")) is None
    assert run(store.get_file("file-1", "team:a", content=True)).content == b"{}\n"
    rows, more = run(store.list_files("team:a", None, None, 2))
    assert [r.id for r in rows] == ["file-2", "file-1"] and more
    rows, more = run(store.list_files("team:a", "batch", "file-1", 2))
    assert [r.id for r in rows] == ["file-0"] and not more
    assert not run(store.delete_file("file-0", "team:b"))
    assert run(store.delete_file("file-0", "team:a"))
    assert run(store.get_file("file-0", "team:a")) is None


def test_one_runner_holds_a_batch_until_its_lease_lapses(store):
    run(store.add_batch(_batch("batch_1")))
    assert run(store.claimable()) == ["batch_1"]
    assert run(store.claim("batch_1", "r1", 10))
    assert not run(store.claim("batch_1", "r2", 10))
    assert run(store.claimable()) == []
    assert run(store.renew("batch_1", "r1", 10)).status == "validating"
    store.clock.now += 11                      # r1 stopped renewing
    assert run(store.claimable()) == ["batch_1"]
    assert run(store.claim("batch_1", "r2", 10))
    assert run(store.renew("batch_1", "r1", 10)) is None
    assert not run(store.update_held("batch_1", "r1", status="in_progress"))
    assert run(store.update_held("batch_1", "r2", status="in_progress"))


def test_a_line_is_stored_and_counted_once_and_only_by_the_holder(store):
    run(store.add_batch(_batch("batch_2")))
    assert run(store.claim("batch_2", "r1", 10))
    assert run(store.save_result("batch_2", "r1", 1, True, '{"a":1}'))
    assert run(store.save_result("batch_2", "r1", 1, True, '{"a":1}'))   # again: ignored
    assert run(store.save_result("batch_2", "r1", 2, False, '{"e":1}'))
    assert not run(store.save_result("batch_2", "r9", 3, True, '{"a":3}'))
    batch = run(store.get_batch("batch_2"))
    assert (batch.completed, batch.failed) == (1, 1)
    assert run(store.finished_lines("batch_2")) == {1, 2}
    assert run(store.results("batch_2")) == [(1, True, '{"a":1}'), (2, False, '{"e":1}')]
    assert run(store.finish("batch_2", "r1", [], status="completed"))
    done = run(store.get_batch("batch_2"))
    assert done.status == "completed" and done.claimed_by is None
    assert run(store.claimable()) == []


def test_cancel_moves_only_running_batches_and_only_the_owners(store):
    run(store.add_batch(_batch("batch_3")))
    assert run(store.request_cancel("batch_3", "team:b")) is None
    assert run(store.request_cancel("batch_3", "team:a")).status == "cancelling"
    run(store.add_batch(_batch("batch_4")))
    assert run(store.claim("batch_4", "r1", 10))
    assert run(store.finish("batch_4", "r1", [], status="completed"))
    assert run(store.request_cancel("batch_4", "team:a")).status == "completed"
    rows, more = run(store.list_batches("team:a", None, 1))
    assert [r.id for r in rows] == ["batch_4"] and more
    rows, more = run(store.list_batches("team:a", "batch_4", 5))
    assert [r.id for r in rows] == ["batch_3"] and not more
