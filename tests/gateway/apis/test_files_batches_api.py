"""The Files and Batch APIs through the official `openai` SDK against a real `inferplane up`
(SQLite registry) with a fake engine: upload, list, read and delete files; a batch whose bad
lines land in the error file with their line numbers while every other line completes; the
size bound; tenants; cancel; pages; usage rows as for interactive requests."""
from __future__ import annotations

import io
import time

import httpx
import openai
import pytest

from tests.gateway.apis.batch_stack import (MAX_FILE_BYTES, MODEL, batch_stack, chat_line, jsonl,
                                            records, wait_batch)


@pytest.fixture(scope="module")
def batches_up(tmp_path_factory):
    with batch_stack(tmp_path_factory.mktemp("batches")) as stack:
        team_a = stack.key("team-a")
        yield stack, stack.client(team_a), stack.client(stack.key("team-a")), \
            stack.client(stack.key("team-b"))


def test_files_round_trip_and_belong_to_the_team(batches_up):
    _, client, teammate, other = batches_up
    content = jsonl([chat_line("one")])
    made = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    assert (made.object, made.purpose, made.bytes, made.filename) == \
        ("file", "batch", len(content), "in.jsonl")
    assert teammate.files.retrieve(made.id).id == made.id          # the same team
    assert client.files.content(made.id).content == content
    assert made.id in [f.id for f in client.files.list(purpose="batch")]
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(made.id)
    assert made.id not in [f.id for f in other.files.list()]
    with pytest.raises(openai.NotFoundError):
        other.files.delete(made.id)
    assert client.files.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)


def test_an_oversized_upload_is_a_413_in_openai_shape(batches_up):
    stack, client, _, _ = batches_up
    big = b"x" * (MAX_FILE_BYTES + 1)
    with pytest.raises(openai.APIStatusError) as caught:
        client.files.create(file=("big.jsonl", io.BytesIO(big)), purpose="batch")
    assert caught.value.status_code == 413
    assert caught.value.body["code"] == "body_too_large"
    huge = httpx.post(stack.base + "/v1/files", timeout=30,
                      headers={"Authorization": f"Bearer {client.api_key}"},
                      files={"file": ("h.jsonl", b"x" * (MAX_FILE_BYTES * 4))},
                      data={"purpose": "batch"})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "body_too_large"


def test_bad_uploads_and_bad_batches_are_refused_clearly(batches_up):
    _, client, _, other = batches_up
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="nonsense")
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("x.jsonl", io.BytesIO(b"\xff\xfe\n")), purpose="batch")
    made = client.files.create(file=("x.jsonl", io.BytesIO(jsonl([chat_line("a")]))),
                               purpose="batch")
    with pytest.raises(openai.NotFoundError):
        other.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                             completion_window="24h")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=made.id, endpoint="/v1/responses",
                              completion_window="24h")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                              completion_window="1h")


def test_bad_lines_fail_alone_with_their_line_numbers(batches_up):
    stack, client, _, other = batches_up
    lines = [chat_line("ok-1"), "{not json", chat_line("ok-2"),
             {**chat_line("wrong-url"), "url": "/v1/embeddings"},
             chat_line("engine-refuses", text="TOO_LONG"), "", chat_line("ok-1"),
             {**chat_line("wrong-method"), "method": "GET"}, chat_line("ok-3")]
    made = client.files.create(file=("mixed.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    batch = client.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"run": "mixed"})
    assert batch.status == "validating" and batch.metadata == {"run": "mixed"}
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    done = wait_batch(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed,
            done.request_counts.failed) == (8, 3, 5)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    out = records(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in out) == ["ok-1", "ok-2", "ok-3"]
    for r in out:
        assert r["response"]["status_code"] == 200 and r["error"] is None
        assert r["response"]["body"]["choices"][0]["message"]["content"]
        assert r["response"]["request_id"]
    errors = {(r["error"] or {}).get("line") or r["custom_id"]: r
              for r in records(client, done.error_file_id)}
    assert errors[2]["error"]["code"] == "invalid_json_line"
    assert errors[4]["error"]["code"] == "invalid_url"
    assert errors[7]["error"]["code"] == "duplicate_custom_id"
    assert errors[8]["error"]["code"] == "invalid_method"
    refused = errors["engine-refuses"]["response"]
    assert refused["status_code"] == 400 and "error" in refused["body"]
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    with pytest.raises(openai.NotFoundError):
        other.files.content(done.output_file_id)
    # billed as interactive requests are: one usage row per line that reached the model
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    deadline = time.monotonic() + 10
    while True:
        rows = httpx.get(stack.base + "/admin/v1/requests", headers=admin, timeout=10,
                         params={"model": MODEL, "limit": 100}).json()
        ids = {r["request_id"] for r in rows["data"] if r["team"] == "team-a"}
        if all(r["response"]["request_id"] in ids for r in out) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(r["response"]["request_id"] in ids for r in out)


def test_cancel_stops_a_running_batch(batches_up):
    stack, client, _, _ = batches_up
    stack.engine(first_token_delay=0.5)
    try:
        made = client.files.create(file=("slow.jsonl", io.BytesIO(
            jsonl([chat_line(f"s{i}") for i in range(40)]))), purpose="batch")
        batch = client.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        wait_batch(client, batch.id, statuses=("in_progress",))
        assert client.batches.cancel(batch.id).status == "cancelling"
        done = wait_batch(client, batch.id)
    finally:
        stack.engine(first_token_delay=0.0)
    assert done.status == "cancelled" and done.cancelled_at
    assert done.request_counts.completed < 40
    assert len(records(client, done.output_file_id)) == done.request_counts.completed
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(wait_batch(client, _quick_batch(client)).id)


def _quick_batch(client) -> str:
    made = client.files.create(file=("q.jsonl", io.BytesIO(jsonl([chat_line("q")]))),
                               purpose="batch")
    return client.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                                 completion_window="24h").id


def test_batches_list_in_pages_newest_first(batches_up):
    _, client, teammate, other = batches_up
    made = [_quick_batch(client) for _ in range(3)]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == made[0]
    assert made[0] in [b.id for b in teammate.batches.list(limit=100)]
    assert not {b.id for b in other.batches.list(limit=100)} & set(made)
