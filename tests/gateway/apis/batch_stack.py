"""A real `inferplane up` serving a fake OpenAI engine, for the Files and Batch API tests:
teams and keys made through the admin API, the official `openai` SDK as the client."""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass

import httpx
import openai

from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import openai_model, start_fake_engine, stop_process

MODEL = "batch-model"
MAX_FILE_BYTES = 64 * 1024


def config(engine_port: int, **batches) -> dict:
    return {"models": [openai_model(MODEL, f"http://127.0.0.1:{engine_port}/v1")],
            "gateway": {"batches": {"max_file_bytes": MAX_FILE_BYTES, "lease_s": 3.0,
                                    "poll_s": 0.2, "concurrency": 4, **batches}}}


@dataclass
class BatchStack:
    base: str
    admin_key: str
    engine_control: str

    def key(self, team: str | None = None) -> str:
        admin = {"Authorization": f"Bearer {self.admin_key}"}
        if team is not None:
            httpx.post(self.base + "/admin/v1/teams", headers=admin, json={"name": team},
                       timeout=10)
        body = {"name": f"batch-{time.monotonic_ns()}", **({"team": team} if team else {})}
        created = httpx.post(self.base + "/admin/v1/keys", headers=admin, json=body, timeout=10)
        assert created.status_code == 201, created.text
        secret = created.json()["secret"]
        deadline = time.monotonic() + 10   # the gateway knows the key once its snapshot does
        while httpx.get(self.base + "/v1/models", timeout=5, headers={
                "Authorization": f"Bearer {secret}"}).status_code == 401:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        return secret

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, timeout=30)

    def engine(self, **faults) -> None:
        httpx.post(self.engine_control, json=faults, timeout=5).raise_for_status()


def chat_line(custom_id: str, text: str = "hello", **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": MODEL, "max_tokens": 3,
                     "messages": [{"role": "user", "content": text}]}, **extra}


def jsonl(lines) -> bytes:
    return b"".join((json.dumps(x) if not isinstance(x, str) else x).encode() + b"\n"
                    for x in lines)


def wait_batch(client: openai.OpenAI, batch_id: str, statuses=("completed", "failed",
                                                               "cancelled", "expired"),
               timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        assert time.monotonic() < deadline, f"batch stuck in {batch.status}"
        time.sleep(0.2)


def records(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


@contextlib.contextmanager
def batch_stack(work, up_args: tuple[str, ...] = (), **batches):
    engine_port = free_port()
    engine = start_fake_engine(engine_port, MODEL, work / "fake.log")
    try:
        with running_up(work, config(engine_port, **batches), args=up_args) as (base, key, _):
            yield BatchStack(base, key, f"http://127.0.0.1:{engine_port}/control")
    finally:
        stop_process(engine)
