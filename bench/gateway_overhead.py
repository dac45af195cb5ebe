"""Gateway overhead: a fast mock engine called directly vs through the gateway.

    python bench/gateway_overhead.py [--rates 100,500,1000] [--duration 10] [--stream both]
        [--max-duration 10] [--connections 64] [--profile DIR] [--profile-rate 500]
        [--log-level INFO] [--tracing on] [--gc-freeze on] [--workers 1]

Per mode (stream / non-stream) and fixed open-loop rate: the latency the gateway adds at
P50/P95/P99 (through-gateway percentile minus direct percentile, same generator, same rate)
and the gateway's CPU time per request (from /proc, steadier than latency on a shared box);
then the maximum sustainable RPS of each path, measured with `wrk` (closed loop, C
connections; apt-get install wrk) or, without wrk, the highest open-loop rate with under 1%
errors. The mock engine (bench/_mock_engine.py), the gateway and the load generator
(bench/_http_load.py) are separate processes; on a small machine they share the cores, so the
figures are an upper bound on what the gateway costs on a core of its own.
--log-level, --tracing and --gc-freeze set the gateway's settings of those names, to price them.
--profile DIR records the gateway with py-spy during the --profile-rate run and prints its
hottest functions (pip install py-spy).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SECRET = "ip-bench-secret"
PCTS = (0.50, 0.95, 0.99)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_gateway(port: int, engine_port: int, log_level: str, tracing: bool,
                  gc_freeze: bool, workers: int = 1) -> None:
    """Child process: the gateway app with a static snapshot pointing at the mock engine, served
    the way `inferplane gateway` serves it (uvloop, httptools, its own logging setup), in
    `workers` processes on one socket (limits shared through the supervisor's store)."""
    sys.path.insert(0, str(ROOT))
    from common.connections import listen_sockets

    socks = listen_sockets("127.0.0.1", port, workers)
    if workers > 1:
        from common.workers import serve_workers
        from gateway.limits.shared import limits_store
        sys.exit(serve_workers(socks, lambda sock: _serve_one(sock, engine_port, log_level,
                                                              tracing, gc_freeze) or 0,
                               limits_store()))
    _serve_one(socks[0], engine_port, log_level, tracing, gc_freeze)


def _serve_one(sock, engine_port: int, log_level: str, tracing: bool, gc_freeze: bool) -> None:
    import logging

    import uvicorn

    from common.auth.keys import hash_key
    from gateway.app import create_gateway_app
    from gateway.settings import GatewaySettings
    from registry.snapshot import BackendView, KeyView, ModelView, RoutingSnapshot

    for noisy in ("httpx", "httpcore"):   # as `inferplane gateway` does (control_plane.up)
        logging.getLogger(noisy).setLevel(logging.WARNING)
    b = BackendView(id="mock", url=f"http://127.0.0.1:{engine_port}/v1", engine="vllm",
                    served_model="mock", gpu=None, weight=1.0, tier="hot", state="ready",
                    adapters=(), version="v1")
    m = ModelView(name="mock", context_length=8192, backends=(b,), routing="least_loaded",
                  fallbacks=(), tier="hot", price_in_per_1k=0.0, price_out_per_1k=0.0, splits=())
    # Limits on (never reached): every request pays the RPM/TPM check and the budget hold.
    k = KeyView(key_id=1, key_hash=hash_key(SECRET), name="bench", team="bench", role="user",
                models=None, rpm_limit=10**9, tpm_limit=10**12, max_budget=None,
                priority="standard", expires_at=None, revoked=False)

    class Source:
        current = RoutingSnapshot(version=1, models={"mock": m}, aliases={}, keys={k.key_hash: k})

    settings = GatewaySettings(routing={"load_poll_interval_s": 0}, log_level=log_level,
                               tracing={"enabled": tracing}, gc_freeze=gc_freeze,
                               admission={"queue_size": 100_000,
                                          "max_inflight_per_backend": 100_000})
    config = uvicorn.Config(create_gateway_app(settings, Source()), log_level="warning",
                            loop="uvloop", http="httptools", access_log=False, backlog=4096)
    uvicorn.Server(config).run(sockets=[sock])


def spawn(args: list[str], health: str, log: Path) -> subprocess.Popen:
    """Start a server whose output goes to `log` (a file, as in production, not a terminal)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(health, trust_env=False, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{args} did not start")


def load(url: str, rate: float, duration: float, stream: bool) -> dict:
    args = [sys.executable, str(BENCH / "_http_load.py"), "--url", url, "--rate", str(rate),
            "--duration", str(duration), "--key", SECRET] + (["--stream"] if stream else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True,
                         timeout=duration * 10 + 60)
    return json.loads(out.stdout)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (robust to other load, unlike latency)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def report(label: str, direct: dict, through: dict, cpu_s: float) -> dict:
    d = [pct(direct["latencies"], q) for q in PCTS]
    g = [pct(through["latencies"], q) for q in PCTS]
    added = [b - a for a, b in zip(d, g)]
    print(f"{label:<22} added P50 {added[0]:6.2f} ms  P95 {added[1]:6.2f} ms  "
          f"P99 {added[2]:6.2f} ms | direct P50/P99 {d[0]:.2f}/{d[2]:.2f} ms, gateway "
          f"{g[0]:.2f}/{g[2]:.2f} ms | errors {direct['error_kinds']}/{through['error_kinds']}, "
          f"achieved {through['achieved_rps']:.0f} RPS, send lag P99 "
          f"{through['lag_p99_ms']:.1f} ms, gateway CPU "
          f"{cpu_s * 1e6 / max(1, through['sent']):.0f} us/request", flush=True)
    return {"label": label, "added_ms": added, "direct_ms": d, "gateway_ms": g,
            "errors": [direct["errors"], through["errors"]]}


def wrk_rps(url: str, stream: bool, duration: float, connections: int) -> tuple[float, int]:
    """(requests/s, non-2xx count) from a closed-loop wrk run."""
    body = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 4, "stream": stream})
    script = (f'wrk.method = "POST"\nwrk.body = [[{body}]]\n'
              f'wrk.headers["Content-Type"] = "application/json"\n'
              f'wrk.headers["Authorization"] = "Bearer {SECRET}"\n')
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{int(duration)}s", "-s",
                              f.name, url], capture_output=True, text=True, check=True,
                             timeout=duration + 60).stdout
    finally:
        os.unlink(f.name)
    rps = float(next(line.split()[1] for line in out.splitlines()
                     if line.startswith("Requests/sec")))
    bad = next((int(line.split()[-1]) for line in out.splitlines() if "Non-2xx" in line), 0)
    return rps, bad


def ramp_rps(url: str, stream: bool, duration: float, start: float = 500) -> float:
    """Without wrk: the highest open-loop rate served with under 1% errors and a P99 < 100 ms."""
    best, rate = 0.0, start
    while rate < 20_000:
        result = load(url, rate, duration, stream)
        if result["errors"] > 0.01 * result["sent"] or pct(result["latencies"], 0.99) > 100:
            break
        best, rate = result["achieved_rps"], rate * 1.25
    return best


def max_rps(url: str, stream: bool, args) -> str:
    if shutil.which("wrk"):
        rps, bad = wrk_rps(url, stream, args.max_duration, args.connections)
        return f"{rps:.0f} (wrk, {args.connections} connections, non-2xx {bad})"
    return f"{ramp_rps(url, stream, args.max_duration):.0f} (open-loop ramp)"


def profiled(pid: int, out: Path, duration: float) -> list[subprocess.Popen]:
    """py-spy on the gateway (and its workers): collapsed stacks in `out` for the table below,
    and the same run as a flame graph beside it (`out` with .svg)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return [subprocess.Popen([spy, "record", "--pid", str(pid), "--subprocesses", "--duration",
                              str(int(duration)), "--rate", "250", "--format", fmt, "--output",
                              str(path), "--nonblocking"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            for fmt, path in (("raw", out), ("flamegraph", out.with_suffix(".svg")))]


def hottest(collapsed: Path, top: int = 15) -> None:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                  + ")" for f in stack.split(";")]
        n = int(count)
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            incl[frame] = incl.get(frame, 0) + n
    print(f"  py-spy: {total} samples; top self time:")
    for name, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {100 * n / total:5.1f}% self {100 * incl[name] / total:5.1f}% incl  {name}")


def run(args) -> list[dict]:
    engine_port, gateway_port = free_port(), free_port()
    logs = Path(tempfile.mkdtemp(prefix="gateway-overhead-"))
    print(f"server logs in {logs}", flush=True)
    procs = [spawn([str(BENCH / "_mock_engine.py"), "--port", str(engine_port)],
                   f"http://127.0.0.1:{engine_port}/health", logs / "engine.log")]
    results = []
    try:
        procs.append(spawn([__file__, "--serve-gateway", str(gateway_port), str(engine_port),
                            "--log-level", args.log_level, "--tracing", args.tracing,
                            "--gc-freeze", args.gc_freeze, "--workers", str(args.workers)],
                           f"http://127.0.0.1:{gateway_port}/healthz", logs / "gateway.log"))
        direct = f"http://127.0.0.1:{engine_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        modes = {"yes": [True], "no": [False], "both": [False, True]}[args.stream]
        for stream in modes:
            kind = "stream" if stream else "non-stream"
            for rate in (float(r) for r in args.rates.split(",")):
                d = load(direct, rate, args.duration, stream)
                spy = None
                if args.profile and rate == args.profile_rate:
                    out = Path(args.profile) / f"gateway-{kind}-{rate:.0f}.txt"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    spy = profiled(procs[1].pid, out, args.duration)
                cpu = cpu_seconds(procs[1].pid)
                g = load(through, rate, args.duration, stream)
                cpu = cpu_seconds(procs[1].pid) - cpu
                results.append(report(f"{kind} @ {rate:.0f} RPS", d, g, cpu))
                if spy is not None:
                    for recorder in spy:
                        recorder.wait(timeout=60)
                    hottest(out)
            if args.max_duration > 0:
                print(f"{kind} max sustainable RPS: direct {max_rps(direct, stream, args)}; "
                      f"through gateway {max_rps(through, stream, args)}", flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="100,500,1000")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--stream", choices=["yes", "no", "both"], default="both")
    parser.add_argument("--max-duration", type=float, default=10.0,
                        help="seconds of each max-RPS run (0 skips it)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--profile", default=None, help="directory for py-spy recordings")
    parser.add_argument("--profile-rate", type=float, default=500, help="the rate to profile")
    parser.add_argument("--log-level", default="INFO",
                        help="the gateway's log level (INFO writes one access line per request)")
    parser.add_argument("--tracing", choices=["on", "off"], default="on",
                        help="the gateway's OpenTelemetry spans (on is the default setting)")
    parser.add_argument("--gc-freeze", choices=["on", "off"], default="on",
                        help="freeze start-up objects out of the collector (the default)")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes")
    parser.add_argument("--serve-gateway", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        serve_gateway(*args.serve_gateway, args.log_level, args.tracing == "on",
                      args.gc_freeze == "on", args.workers)
        return
    run(args)


if __name__ == "__main__":
    main()
