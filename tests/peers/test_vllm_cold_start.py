"""A vLLM the control plane manages, through `inferplane up` (gateway and control plane in one
process): a cold model with a vLLM template gets its engine from the first request (gateway
ColdStarter → TierManager → EngineSupervisor), that request is answered by vLLM, the next one
goes straight through; the managed vLLM then serves as the second engine of the warm tier's
LoRA AdapterManager beside the session's vLLM (adapters loaded by plain requests, one slot
each: a second adapter goes to the other engine, a third evicts the least recently used), and
requests for each adapter are routed by LoRA affinity to the engine holding it; idle, it is
stopped, process group and all.

One vLLM start beyond the session's: the session's vLLM is spawned first and warms up while the
cold start runs, so the two 90-200 s starts overlap. The tests run in file order on one stack.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench import _real_engines as real
from common.metric_names import EngineMetric
from engine_adapter import engine_keys
from tests.conftest import running_up
from tests.peers.conftest import make_lora

MODEL = real.SERVED  # both engines serve the model under the same name
START_S = 900  # a vLLM start on a loaded 2-core host, another vLLM warming up beside it
IDLE_S = 12.0
ADAPTERS = ("a", "b", "c")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@dataclass
class Stack:
    base: str
    headers: dict
    log: Path
    engine_procs: list = field(default_factory=list)  # the managed vLLM's process group

    def admin(self, method: str, path: str, **kw) -> httpx.Response:
        kw.setdefault("timeout", 30)
        return httpx.request(method, self.base + "/admin/v1" + path, headers=self.headers,
                             trust_env=False, **kw)

    def backends(self) -> list[dict]:
        r = self.admin("GET", "/backends", params={"model": MODEL})
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def managed(self) -> dict:
        (row,) = [b for b in self.backends() if b["managed"]]
        return row

    def chat(self, model: str) -> httpx.Response:
        r = httpx.post(self.base + "/v1/chat/completions", headers=self.headers, trust_env=False,
                       timeout=START_S, json={"model": model, "messages": QUESTION,
                                              "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, f"{r.status_code} {r.text}\n{self.log_tail()}"
        return r

    def load_by_request(self, adapter: str) -> str:
        """A plain request for `adapter`, which no engine holds: the gateway has the tier
        manager's AdapterManager load it; the engine the registry now lists it on."""
        self.chat(f"{MODEL}:{adapter}")
        (url,) = [b["url"] for b in self.backends() if adapter in b["adapters"]]
        return url

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:] if self.log.exists() else ""


@pytest.fixture(scope="module")
def stack(peer_dirs, vllm_server, tmp_path_factory):
    vllm_server.begin()  # warms up while the cold start below runs
    work = tmp_path_factory.mktemp("managed")
    for i, name in enumerate(ADAPTERS):
        make_lora(peer_dirs, work / f"lora-{name}", seed=i)
    model = real.vllm_model_config(peer_dirs, MODEL, tier="cold", routing="lora_affinity",
                                   engine_args={"lora_rank": 8, "max_loras": 1})
    config = {"engine_port_base": real.free_port(), "engine_ready_timeout_s": START_S,
              "gateway": {"admission": {"cold_start_budget_s": START_S},
                          "timeouts": {"first_token": START_S, "total": START_S}},
              "tiers": {"idle_s": IDLE_S, "tick_s": 0.5, "max_loras": 1, "min_residency_s": 1.0,
                        "executables": [model["executable"]]},
              "models": [model]}
    with running_up(work, config, ready_path="/healthz") as (base, key, _proc):
        s = Stack(base, {"Authorization": f"Bearer {key}"}, work / "up.log")
        yield s
    for proc in s.engine_procs:  # `up` stops its engines on exit; nothing may outlive it
        if proc.is_running():
            proc.kill()


def _successes(url: str, expect: float | None = None) -> float:
    """vLLM's finished-request count; with `expect`, waits (briefly) until it gets there:
    the counter may move just after the response has left."""
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(url.removesuffix("/v1") + "/metrics", trust_env=False, timeout=10).text
        count = sum(sample.value for family in text_string_to_metric_families(text)
                    if family.name == EngineMetric.REQUEST_SUCCESS
                    for sample in family.samples if sample.name.endswith("_total"))
        if expect is None or count >= expect or time.monotonic() > deadline:
            return count
        time.sleep(0.2)


def _served(url: str, headers: dict | None = None) -> set[str]:
    cards = httpx.get(url + "/models", trust_env=False, timeout=10, headers=headers).json()["data"]
    return {c["id"] for c in cards}


def _engine_key(stack, url: str) -> str:
    """The managed engine's derived key, from the secret `up` keeps in its data directory."""
    secret = (stack.log.parent / ".inferplane" / engine_keys.SECRET_FILE).read_bytes().strip()
    return engine_keys.derive(secret, url)


def _keyed(stack, url: str) -> dict:
    return {"Authorization": f"Bearer {_engine_key(stack, url)}"}


def _group_of(port: int) -> list[psutil.Process]:
    """The vLLM API server listening on `port` and its descendants (the engine core)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "serve" in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1] == str(port):
            return [proc, *proc.children(recursive=True)]
    return []


def _await_keeping_warm(stack: Stack, vllm_server) -> None:
    """Until the session's vLLM (started beside the managed one) is ready for the next test;
    meanwhile requests keep the managed engine from idling out."""
    with ThreadPoolExecutor(1) as pool:
        session = pool.submit(vllm_server.get)
        while not wait([session], timeout=IDLE_S / 3).done:
            stack.chat(MODEL)
        session.result()


def test_first_request_cold_starts_a_managed_vllm(stack, vllm_server):
    assert stack.backends() == []
    started = time.monotonic()
    stack.chat(MODEL)
    cold_s = time.monotonic() - started
    row = stack.managed()
    assert (row["engine"], row["state"]) == ("vllm", "ready")
    assert _successes(row["url"], expect=1) == 1  # vLLM answered the request that started it
    stack.engine_procs = _group_of(row["port"])
    assert len(stack.engine_procs) >= 2, "API server and engine core"
    # started with its derived key: vLLM's port refuses a caller without it
    assert httpx.get(row["url"] + "/models", trust_env=False, timeout=10).status_code == 401
    assert MODEL in _served(row["url"], _keyed(stack, row["url"]))
    key = _engine_key(stack, row["url"])
    assert not any(key in " ".join(p.cmdline()) for p in stack.engine_procs)  # nor in a listing

    _await_keeping_warm(stack, vllm_server)
    before = _successes(row["url"])
    started = time.monotonic()
    stack.chat(MODEL)
    warm_s = time.monotonic() - started
    assert _successes(row["url"], expect=before + 1) == before + 1
    assert [b["url"] for b in stack.backends()] == [row["url"]] and warm_s < 30
    print(f"managed vLLM cold start: first request answered after {cold_s:.1f} s; "
          f"second request {warm_s:.2f} s")


def test_lora_adapters_spread_over_two_vllms_by_affinity(stack, vllm):
    managed = stack.managed()["url"]
    r = stack.admin("POST", "/backends", json={"model": MODEL, "url": vllm.url, "engine": "vllm",
                                               "served_model": real.SERVED, "state": "ready",
                                               "tier": "cold"})
    assert r.status_code == 201, r.text
    for name in ADAPTERS:
        r = stack.admin("POST", f"/models/{MODEL}/adapters", json={
            "name": name, "source_uri": str(stack.log.parent / f"lora-{name}"), "rank": 8})
        assert r.status_code == 201, r.text
    try:
        # a slot free on both: the first engine gets it
        assert stack.load_by_request("a") == managed
        assert stack.load_by_request("b") == vllm.url  # its one slot taken: the other engine
        keyed = _keyed(stack, managed)
        assert "a" in _served(managed, keyed) and "b" not in _served(managed, keyed)
        assert "b" in _served(vllm.url) and "a" not in _served(vllm.url)

        for adapter, holder, other in (("a", managed, vllm.url), ("b", vllm.url, managed)):
            before = _successes(holder), _successes(other)
            for _ in range(2):
                stack.chat(f"{MODEL}:{adapter}")
            assert _successes(holder, expect=before[0] + 2) == before[0] + 2, adapter
            assert _successes(other) == before[1], adapter

        time.sleep(1.1)  # past min_residency_s: "a" (least recently used) may now be evicted
        assert stack.load_by_request("c") == managed
        assert {"c"} <= _served(managed, keyed) and "a" not in _served(managed, keyed)
        assert "b" in _served(vllm.url)
        rows = {b["url"]: b["adapters"] for b in stack.backends()}
        assert rows == {managed: ["c"], vllm.url: ["b"]}
    finally:  # the session's vLLM goes on serving other tests without adapters
        for name in _served(vllm.url) & set(ADAPTERS):
            httpx.post(vllm.url + "/unload_lora_adapter", json={"lora_name": name},
                       trust_env=False, timeout=30)


def test_idle_managed_vllm_is_stopped_with_its_process_group(stack, vllm):
    row = stack.managed()
    assert stack.engine_procs and all(p.is_running() for p in stack.engine_procs)
    deadline = time.monotonic() + IDLE_S + 120
    while any(b["managed"] for b in stack.backends()) and time.monotonic() < deadline:
        time.sleep(1)
    assert [b["url"] for b in stack.backends()] == [vllm.url], stack.log_tail()
    _gone, alive = psutil.wait_procs(stack.engine_procs, timeout=30)
    assert alive == [], f"left running: {alive}"
    with pytest.raises(httpx.ConnectError):
        httpx.get(row["url"].removesuffix("/v1") + "/health", trust_env=False, timeout=5)
