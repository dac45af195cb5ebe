"""A batch survives its gateway: `inferplane up` on PostgreSQL is killed (SIGKILL) while a
batch runs, started again on the same database, and the batch completes with every line in
the output file exactly once (the new process takes the batch over once the dead one's lease
lapses, and skips the lines already stored)."""
from __future__ import annotations

import io
import time
import uuid

import httpx
import openai
import psycopg
import pytest

from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import start_fake_engine, stop_process
from tests.gateway.apis.batch_stack import MODEL, chat_line, config, jsonl, records, wait_batch

LINES = 60
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def database():
    name = f"inferplane_batch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_batch_completes_once_after_its_gateway_is_killed(database, tmp_path):
    engine_port = free_port()
    engine = start_fake_engine(engine_port, MODEL, tmp_path / "fake.log")
    control = f"http://127.0.0.1:{engine_port}"
    httpx.post(control + "/control", json={"first_token_delay": 0.15}, timeout=5)
    cfg = {**config(engine_port), "database_url": database}
    try:
        with running_up(tmp_path, cfg) as (base, admin_key, proc):
            key = httpx.post(base + "/admin/v1/keys", timeout=10,
                             headers={"Authorization": f"Bearer {admin_key}"},
                             json={"name": "batcher"}).json()["secret"]
            time.sleep(1.5)   # the gateway's snapshot learns the key
            client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=2)
            made = client.files.create(file=("many.jsonl", io.BytesIO(
                jsonl([chat_line(f"line-{i}") for i in range(LINES)]))), purpose="batch")
            batch_id = client.batches.create(input_file_id=made.id, completion_window="24h",
                                             endpoint="/v1/chat/completions").id
            deadline = time.monotonic() + 60
            while client.batches.retrieve(batch_id).request_counts.completed < 10:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            proc.kill()               # no drain, no lease released: the process is gone
            proc.wait()
        with running_up(tmp_path, cfg) as (base, _, _):
            client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=2)
            before = client.batches.retrieve(batch_id)
            assert before.status == "in_progress" and before.request_counts.completed < LINES
            done = wait_batch(client, batch_id, timeout=120)
            client_counts = done.request_counts
            out = records(client, done.output_file_id)
    finally:
        stop_process(engine)
    assert done.status == "completed"
    assert (client_counts.total, client_counts.completed, client_counts.failed) == (LINES, LINES, 0)
    ids = [r["custom_id"] for r in out]
    assert sorted(ids) == sorted(f"line-{i}" for i in range(LINES))   # each exactly once
    assert done.error_file_id is None


def test_several_gateway_workers_run_each_line_once(database, tmp_path):
    """`up --workers 3`: every worker runs a batch runner; the lease gives each batch to one,
    so the engine sees each line once."""
    engine_port = free_port()
    engine = start_fake_engine(engine_port, MODEL, tmp_path / "fake.log")
    control = f"http://127.0.0.1:{engine_port}"
    # a lease far longer than any pause of a busy machine: nothing dies here, so no takeover
    cfg = {**config(engine_port, lease_s=15.0), "database_url": database}
    try:
        with running_up(tmp_path, cfg, args=("--workers", "3")) as (base, admin_key, _):
            key = httpx.post(base + "/admin/v1/keys", timeout=10,
                             headers={"Authorization": f"Bearer {admin_key}"},
                             json={"name": "batcher"}).json()["secret"]
            time.sleep(2.0)   # every worker's snapshot learns the key
            client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=2)
            batch_ids = []
            for b in range(3):
                made = client.files.create(file=(f"b{b}.jsonl", io.BytesIO(
                    jsonl([chat_line(f"b{b}-{i}") for i in range(20)]))), purpose="batch")
                batch_ids.append(client.batches.create(
                    input_file_id=made.id, completion_window="24h",
                    endpoint="/v1/chat/completions").id)
            done = [wait_batch(client, batch_id, timeout=120) for batch_id in batch_ids]
            outputs = [records(client, d.output_file_id) for d in done]
        served = httpx.get(control + "/stats", timeout=5).json()["requests"]
    finally:
        stop_process(engine)
    assert [d.status for d in done] == ["completed"] * 3
    for b, out in enumerate(outputs):
        assert sorted(r["custom_id"] for r in out) == sorted(f"b{b}-{i}" for i in range(20))
    assert served == 60
