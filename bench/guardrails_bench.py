"""Guardrails cost: the gateway's CPU per request with a full policy (every PII detector with
`mask`, banned terms, regular expressions, both directions) vs with guardrails off, in the
same run, on ~1 KB chat prompts answered by an echo engine (so the answer carries the same
text back: ~1 KB streamed 4 characters an event).

    python bench/guardrails_bench.py [--requests 300] [--concurrency 4] [--output result.json]

Two gateway processes serve the same model, one without a policy and one with the full
policy; the load alternates between them, and each one's CPU time is read from /proc (steady
on a shared box, unlike latency). Then the stage alone, in this process: `guard_request` on a
prompt and the guarded stream over an answer's events, per request. Ratios are full / off.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._common import TEXT  # noqa: E402
from bench.gateway_overhead import SECRET, cpu_seconds, free_port, spawn  # noqa: E402

MODEL = "echo"
FULL_POLICY = {
    "pii": {k: "mask" for k in ("email", "phone", "card", "iban", "ip", "secret")},
    "banned_terms": [f"codename-{i}" for i in range(20)] + ["project falcon"],
    "banned_terms_action": "mask",
    "regexes": [{"name": "ticket", "pattern": r"TCK-\d{4,}", "action": "mask"},
                {"name": "employee", "pattern": r"\bEMP\d{6}\b", "action": "mask"}],
    "max_prompt_chars": 100_000,
}
PII = ["Contact me at jane.doe@example.com.", "My number is +1 650-253-0000.",
       "Card 4111 1111 1111 1111 expires soon.", "Server 10.20.30.40 is down.",
       "Use key AKIAIOSFODNN7EXAMPLE for it.", "Pay DE89 3704 0044 0532 0130 00."]


def prompts(n: int, chars: int = 1000, seed: int = 7) -> list[str]:
    """~1 KB English prompts; every other one carries two PII items."""
    rng = random.Random(seed)
    words = TEXT.split()
    out = []
    for i in range(n):
        start = rng.randrange(len(words))
        text = " ".join((words[start:] + words)[:300])[:chars]
        if i % 2 == 0:
            cut = rng.randrange(100, chars - 100)
            text = text[:cut] + " " + " ".join(rng.sample(PII, 2)) + " " + text[cut:]
        out.append(text[:chars + 80])
    return out


def serve_gateway(port: int, engine_port: int, policy: bool) -> None:
    """Child process: a gateway with a static snapshot, the policy bound to the model or not."""
    import logging
    from types import MappingProxyType

    import uvicorn

    from common.auth.keys import hash_key
    from common.connections import listen_sockets
    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings
    from registry.guardrails import GuardrailsView, PolicyView
    from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot

    logging.getLogger("httpx").setLevel(logging.WARNING)
    b = BackendView(id="echo", url=f"http://127.0.0.1:{engine_port}/v1", engine="openai",
                    served_model=MODEL, gpu=None, weight=1.0, tier="hot", state="ready",
                    adapters=(), version="v1")
    m = ModelView(name=MODEL, context_length=None, backends=(b,), routing="least_loaded",
                  fallbacks=(), tier="hot", price_in_per_1k=0.0, price_out_per_1k=0.0, splits=())
    k = KeyView(key_id=1, key_hash=hash_key(SECRET), name="bench", team="bench", role="user",
                models=None, rpm_limit=None, tpm_limit=None, max_budget=None,
                priority="standard", expires_at=None, revoked=False)
    guardrails = GuardrailsView(
        MappingProxyType({"full": PolicyView("full", 1, FULL_POLICY)}),
        MappingProxyType({MODEL: "full"}), MappingProxyType({})) if policy else GuardrailsView()

    class Source:
        current = RoutingSnapshot(version=1, models={MODEL: m}, aliases={},
                                  keys={k.key_hash: k}, guardrails=guardrails)

    settings = GatewaySettings(routing={"load_poll_interval_s": 0}, log_level="WARNING",
                               tracing={"enabled": False})
    config = uvicorn.Config(create_gateway_app(settings, Source()), log_level="warning",
                            loop="uvloop", http="httptools", access_log=False)
    uvicorn.Server(config).run(sockets=listen_sockets("127.0.0.1", port, 1))


async def drive(url: str, texts: list[str], stream: bool, concurrency: int) -> int:
    """Send every text once (closed loop, `concurrency` at a time); the failures."""
    queue = list(texts)
    failures = 0
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False,
                                 headers={"authorization": f"Bearer {SECRET}"}) as client:
        async def worker() -> None:
            nonlocal failures
            while queue:
                body = {"model": MODEL, "stream": stream,
                        "messages": [{"role": "user", "content": queue.pop()}]}
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    data = await r.aread()
                    failures += r.status_code != 200 or (stream and not data.endswith(
                        b"data: [DONE]\n\n"))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failures


def end_to_end(args, texts: list[str]) -> dict:
    engine_port = free_port()
    log = Path(args.log)
    procs = [spawn([str(ROOT / "bench" / "_echo_engine.py"), "--port", str(engine_port)],
                   f"http://127.0.0.1:{engine_port}/health", log)]
    gateways = {}
    try:
        for name in ("off", "full"):
            port = free_port()
            code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.guardrails_bench "
                    f"import serve_gateway; serve_gateway({port}, {engine_port}, "
                    f"{name == 'full'})")
            proc = spawn(["-c", code], f"http://127.0.0.1:{port}/healthz", log)
            procs.append(proc)
            gateways[name] = (f"http://127.0.0.1:{port}", proc.pid)
        results = {}
        for stream in (False, True):
            mode = "stream" if stream else "json"
            cpu = {"off": 0.0, "full": 0.0}
            sent = {"off": 0, "full": 0}
            for url, _pid in gateways.values():   # warm-up: imports, regex caches, pools
                asyncio.run(drive(url, texts[:20], stream, args.concurrency))
            batch = max(20, len(texts) // 5)
            for i in range(0, len(texts), batch):  # alternate, so drift hits both alike
                for name, (url, pid) in gateways.items():
                    before = cpu_seconds(pid)
                    failed = asyncio.run(drive(url, texts[i:i + batch], stream,
                                               args.concurrency))
                    cpu[name] += cpu_seconds(pid) - before
                    sent[name] += len(texts[i:i + batch])
                    if failed:
                        raise RuntimeError(f"{failed} failed requests ({name}, {mode})")
            off, full = (cpu[n] * 1e6 / sent[n] for n in ("off", "full"))
            results[mode] = {"off_us": off, "full_us": full, "added_us": full - off,
                             "ratio": full / off}
        return results
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def stage_only(texts: list[str], repeat: int = 3) -> dict:
    """The guardrail stage alone in this process: per request, CPU microseconds."""
    from types import MappingProxyType, SimpleNamespace

    from bench._echo_engine import events
    from gateway.apis.endpoint import ParsedRequest
    from gateway.guardrails.guarded_stream import GuardedStream
    from gateway.guardrails.request_guard import guard_request
    from gateway.observability.metrics import GatewayMetrics
    from registry.guardrails import GuardrailsView, PolicyView

    metrics = GatewayMetrics()
    views = {"off": GuardrailsView(), "full": GuardrailsView(
        MappingProxyType({"full": PolicyView("full", 1, FULL_POLICY)}),
        MappingProxyType({MODEL: "full"}), MappingProxyType({}))}
    principal = SimpleNamespace(key_id="1")
    streams = [events({"model": MODEL, "messages": [{"role": "user", "content": t}]}, 4)
               for t in texts]

    class Replay:
        def __init__(self, items):
            self.items = items

        async def _gen(self):
            for item in self.items:
                yield item

        def __aiter__(self):
            return self._gen()

        async def aclose(self):
            pass

    async def run(view) -> tuple[float, float]:
        services = SimpleNamespace(snapshot=SimpleNamespace(guardrails=view), metrics=metrics)
        start = time.process_time()
        guards = []
        for text in texts:
            parsed = ParsedRequest(MODEL, {"model": MODEL, "messages": [
                {"role": "user", "content": text}]}, True, False, None, "max_tokens", None)
            guards.append(await guard_request(services, principal, parsed, MODEL))
        request_s = time.process_time() - start
        start = time.process_time()
        for guard, items in zip(guards, streams):
            stream = Replay(items) if guard is None else GuardedStream(Replay(items), guard)
            async for _ in stream:
                pass
        return request_s, time.process_time() - start

    best = {}
    for name, view in views.items():
        runs = [asyncio.run(run(view)) for _ in range(repeat)]
        best[name] = (min(r[0] for r in runs) * 1e6 / len(texts),
                      min(r[1] for r in runs) * 1e6 / len(texts))
    return {"request_off_us": best["off"][0], "request_full_us": best["full"][0],
            "stream_off_us": best["off"][1], "stream_full_us": best["full"][1],
            "events_per_answer": sum(map(len, streams)) / len(streams)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--log", default="/tmp/guardrails_bench.log")
    parser.add_argument("--output")
    args = parser.parse_args()
    texts = prompts(args.requests)
    print(f"command: {' '.join(sys.argv)}")
    print(f"{len(texts)} prompts, mean {sum(map(len, texts)) / len(texts):.0f} characters; "
          f"full policy: 6 PII detectors (mask), {len(FULL_POLICY['banned_terms'])} banned "
          "terms, 2 regexes, input and output")
    e2e = end_to_end(args, texts)
    for mode, r in e2e.items():
        print(f"gateway CPU per request, {mode:<6}: off {r['off_us']:7.0f} us | full "
              f"{r['full_us']:7.0f} us | added {r['added_us']:7.0f} us | ratio {r['ratio']:.2f}x")
    stage = stage_only(texts)
    print(f"stage alone, prompt check : off {stage['request_off_us']:7.2f} us | full "
          f"{stage['request_full_us']:7.1f} us per request")
    print(f"stage alone, streamed answer ({stage['events_per_answer']:.0f} events): off "
          f"{stage['stream_off_us']:7.1f} us | full {stage['stream_full_us']:7.1f} us per "
          "request (iteration only vs iteration + redaction)")
    if args.output:
        Path(args.output).write_text(json.dumps({"command": " ".join(sys.argv),
                                                 "end_to_end": e2e, "stage": stage}, indent=2))


if __name__ == "__main__":
    main()
