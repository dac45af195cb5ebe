"""The HTTP side of `inferplane bench serve`: one OpenAI-compatible request, timed per chunk,
and the arrival process that sends a whole request set.

    target = Target(base_url="http://127.0.0.1:8000/v1", model="smollm2", api_key="sk-…",
                    endpoint="chat", stream=True)
    records = await send_all(target, prompts, rate=4.0, arrival="poisson", max_concurrency=None,
                             seed=0, on_done=progress.update)

Times are taken with perf_counter in the client; each record keeps its send time relative to
the start of the run, so throughput over time can be plotted. Request i is scheduled at its
arrival time whether or not earlier ones finished (open loop), unless --max-concurrency caps
the requests in flight.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from bench._serve_datasets import BenchPrompt


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    api_key: str | None = None
    endpoint: str = "chat"      # chat | completions
    stream: bool = True
    ignore_eos: bool = False    # vLLM's extension: always produce max_tokens
    timeout_s: float = 600.0


@dataclass
class RequestRecord:
    start: float                    # send time, seconds after the run began
    prompt_tokens: int
    tenant: str = ""
    ttft: float | None = None       # seconds to the first content chunk (or the whole body)
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)   # gaps between content chunks
    output_tokens: int = 0
    error: str = ""                 # "" on success; else http_<status>, timeout, an exception

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first, as vLLM's benchmark defines it."""
        if not self.ok or self.output_tokens < 2 or self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


def _body(target: Target, prompt: BenchPrompt) -> dict:
    body: dict = {"model": target.model, "max_tokens": prompt.max_tokens, "temperature": 0.0,
                  "stream": target.stream}
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    if target.stream:
        body["stream_options"] = {"include_usage": True}
    if target.ignore_eos:
        body["ignore_eos"] = True
    return body


def _content(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    first = choices[0]
    return (first.get("delta") or {}).get("content") or first.get("text") or ""


async def _read_stream(response: aiohttp.ClientResponse, record: RequestRecord,
                       sent: float) -> None:
    last = None
    chunks = 0
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        chunk = orjson.loads(data)
        if "error" in chunk:
            record.error = "stream_error"
            return
        if chunk.get("usage"):
            record.output_tokens = chunk["usage"].get("completion_tokens") or 0
        if not _content(chunk):
            continue
        now = time.perf_counter()
        if last is None:
            record.ttft = now - sent
        else:
            record.itl.append(now - last)
        last = now
        chunks += 1
    if last is None:
        record.error = "no_output"
        return
    record.output_tokens = record.output_tokens or chunks
    record.e2e = time.perf_counter() - sent


async def _read_body(response: aiohttp.ClientResponse, record: RequestRecord,
                     sent: float) -> None:
    body = orjson.loads(await response.read())
    record.e2e = record.ttft = time.perf_counter() - sent
    record.output_tokens = (body.get("usage") or {}).get("completion_tokens") or 0


async def send_one(session: aiohttp.ClientSession, target: Target, prompt: BenchPrompt,
                   t0: float) -> RequestRecord:
    path = "/chat/completions" if target.endpoint == "chat" else "/completions"
    headers = {"Content-Type": "application/json"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    sent = time.perf_counter()
    record = RequestRecord(start=sent - t0, prompt_tokens=prompt.prompt_tokens,
                           tenant=prompt.tenant)
    try:
        async with session.post(target.base_url.rstrip("/") + path, headers=headers,
                                data=orjson.dumps(_body(target, prompt)),
                                timeout=aiohttp.ClientTimeout(total=target.timeout_s)) as resp:
            if resp.status != 200:
                record.error = f"http_{resp.status}"
                await resp.read()
                return record
            reader = _read_stream if target.stream else _read_body
            await reader(resp, record, sent)
    except asyncio.TimeoutError:
        record.error = "timeout"
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        record.error = type(exc).__name__
    return record


def arrival_times(n: int, rate: float, arrival: str, seed: int) -> list[float]:
    """Offsets (seconds) at which each request is sent: all at 0 for an infinite rate,
    exponential gaps for Poisson, equal gaps for constant."""
    if rate == float("inf"):
        return [0.0] * n
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        offsets.append(t)
        t += rng.expovariate(rate) if arrival == "poisson" else 1.0 / rate
    return offsets


async def send_all(target: Target, prompts: list[BenchPrompt], rate: float, arrival: str,
                   max_concurrency: int | None, seed: int, on_done=None) -> list[RequestRecord]:
    gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()

        async def scheduled(prompt: BenchPrompt, offset: float) -> RequestRecord:
            await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
            if gate is None:
                record = await send_one(session, target, prompt, t0)
            else:
                async with gate:
                    record = await send_one(session, target, prompt, t0)
            if on_done is not None:
                on_done(1)
            return record

        offsets = arrival_times(len(prompts), rate, arrival, seed)
        return list(await asyncio.gather(*(scheduled(p, o) for p, o in zip(prompts, offsets))))
