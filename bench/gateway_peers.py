"""Inferplane beside peer gateways, in one run, in front of the same fast mock engine.

    inferplane bench gateway_peers [--duration 8] [--rate 300] [--peers-dir /work/peers-cache]
        [--ramp 100,200,400,600,800,1000,1500,2000] [--only inferplane,inferplane-tuned,vllm-router,litellm]
        [--workers 1] [--spread]

For each gateway and mode (stream / non-stream): the latency it adds over calling the mock
directly (P50/P99 at --rate, same open-loop generator), its CPU time per proxied request, and
the highest rate of the --ramp held with P99 ≤ 1 s and under 1% errors. Ratios are printed
against Inferplane. The CPU of a multi-process gateway is also given per process, busiest
first: the load generator reuses its hottest connections as HTTP clients' pools do, so how the
work splits between workers (and with it the CPU a request costs, which is lower when one
worker's loop takes most of it) is up to where those few landed; `--spread` sends over every
warm connection in turn instead, as many separate clients would (16 connections, which the
kernel still spreads over the workers' sockets by a hash, not evenly). Peers run from their
own virtual environments under --peers-dir (`router/bin/vllm-router`, `litellm/bin/litellm`;
`bash bench/install_peers.sh` installs them); a peer whose install is missing is reported as
skipped, not failed. A PNG bar chart of the held rates
and added latency goes beside the JSON result under bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import write_result  # noqa: E402
from bench.gateway_overhead import BENCH, SECRET, free_port, pct  # noqa: E402

LITELLM_KEY = "sk-inferplane-bench"
HELD_P99_S = 1.0


def start(cmd: list[str], health: str, log: Path, env: dict | None = None,
          timeout: float = 120, cwd: Path | None = None) -> subprocess.Popen:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=cwd or BENCH.parent, env={**os.environ, **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(health, trust_env=False, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not become healthy in {timeout:.0f} s; see {log}")


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of a process and each of its children, by pid (LiteLLM and the router may
    fork workers; Inferplane's `up --workers N` does)."""
    proc = psutil.Process(pid)
    out = {}
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def cpu_by_process(before: dict[int, float], after: dict[int, float], sent: int) -> list[float]:
    """ms a request each process spent, busiest first: how a multi-process gateway's work was
    split (a client that reuses its hottest connections can leave one worker most of it)."""
    spent = [(t - before.get(pid, 0.0)) * 1000 / max(1, sent) for pid, t in after.items()]
    return sorted((round(x, 3) for x in spent if x >= 0.001), reverse=True)


def load(url: str, rate: float, duration: float, stream: bool, key: str,
         spread: bool = False) -> dict:
    args = [sys.executable, str(BENCH / "_http_load.py"), "--url", url, "--rate", str(rate),
            "--duration", str(duration), "--key", key] + (["--stream"] if stream else []) + \
        (["--spread"] if spread else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True,
                             timeout=duration * 10 + 60)
    except subprocess.TimeoutExpired:   # a gateway this far behind has failed this rate
        sent = int(rate * duration)
        return {"latencies": [], "errors": sent, "error_kinds": {"load_timeout": sent},
                "sent": sent}
    return json.loads(out.stdout)


def litellm_config(engine_port: int, path: Path) -> Path:
    path.write_text(
        "model_list:\n"
        "  - model_name: mock\n"
        "    litellm_params:\n"
        "      model: openai/mock\n"
        f"      api_base: http://127.0.0.1:{engine_port}/v1\n"
        "      api_key: none\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n")
    return path


def up_default(engine_port: int, work: Path, workers: int) -> dict:
    """`inferplane up --workers N` as a new user runs it: a minimal config (one OpenAI-compatible
    backend, every other setting at its default), its embedded SQLite registry in `work`. The
    admin key is read once `up` is ready (it writes the file on its first start)."""
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    (work / "inferplane.yaml").write_text(
        "models:\n  - name: mock\n    engine: openai\n    backends:\n"
        f"      - url: http://127.0.0.1:{engine_port}/v1\n")
    return {"port": port, "key": lambda: (work / ".inferplane" / "admin.key").read_text().strip(),
            "health": f"http://127.0.0.1:{port}/readyz", "cwd": work,
            "cmd": [sys.executable, "-m", "control_plane", "up", "--config",
                    str(work / "inferplane.yaml"), "--port", str(port),
                    "--workers", str(workers)]}


def gateways(peers: Path, engine_port: int, logs: Path, workers: int = 1) -> dict[str, dict]:
    """name -> how to start it: command, health URL, key, or why it is skipped.

    `inferplane` is the default configuration under `inferplane up --workers 2` (what a user
    gets); `inferplane-tuned` the gateway alone with logs at WARNING and tracing off."""
    ip, vr, ll = free_port(), free_port(), free_port()
    router = peers / "router" / "bin" / "vllm-router"
    litellm = peers / "litellm" / "bin" / "litellm"
    return {
        "inferplane": up_default(engine_port, logs / "up", max(2, workers)),
        "inferplane-tuned": {"port": ip, "key": SECRET, "health": f"http://127.0.0.1:{ip}/healthz",
                       "cmd": [sys.executable, str(BENCH / "gateway_overhead.py"),
                               "--serve-gateway", str(ip), str(engine_port),
                               "--log-level", "WARNING", "--tracing", "off",
                               "--workers", str(workers)]},
        "vllm-router": {"port": vr, "key": SECRET, "health": f"http://127.0.0.1:{vr}/health",
                        "cmd": [str(router), "--host", "127.0.0.1", "--port", str(vr),
                                "--worker-urls", f"http://127.0.0.1:{engine_port}",
                                "--policy", "round_robin"],
                        "skip": None if router.exists() else f"{router} not installed"},
        "litellm": {"port": ll, "key": LITELLM_KEY,
                    "health": f"http://127.0.0.1:{ll}/health/liveliness",
                    "cmd": [str(litellm), "--config",
                            str(litellm_config(engine_port, logs / "litellm.yaml")),
                            "--host", "127.0.0.1", "--port", str(ll), "--num_workers", "1"],
                    "env": {"LITELLM_LOG": "ERROR", "NO_DOCS": "True",
                            "DISABLE_ADMIN_UI": "True"},
                    "skip": None if litellm.exists() else f"{litellm} not installed"},
    }


def held_rate(url: str, stream: bool, key: str, ramp: list[float], duration: float,
              spread: bool = False) -> dict:
    """The highest ramp rate served with P99 ≤ 1 s and < 1% errors (and where it broke)."""
    held, broke = 0.0, None
    for rate in ramp:
        r = load(url, rate, duration, stream, key, spread)
        p99 = pct(r["latencies"], 0.99) / 1000
        if r["errors"] > 0.01 * r["sent"] or p99 > HELD_P99_S or not r["latencies"]:
            broke = {"rate": rate, "p99_s": p99, "errors": r["error_kinds"]}
            break
        held = rate
    return {"held_rps": held, "broke_at": broke}


def measure(name: str, spec: dict, direct: dict, args) -> dict:
    url = f"http://127.0.0.1:{spec['port']}/v1/chat/completions"
    out = {}
    for stream in (False, True):
        kind = "stream" if stream else "non_stream"
        load(url, min(args.rate, 50), 2, stream, spec["key"])   # warm-up (lazy imports)
        before = tree_cpu(spec["proc"].pid)
        r = load(url, args.rate, args.duration, stream, spec["key"], args.spread)
        after = tree_cpu(spec["proc"].pid)
        cpu = sum(t - before.get(pid, 0.0) for pid, t in after.items())
        d = direct[kind]
        out[kind] = {
            "added_p50_ms": pct(r["latencies"], 0.5) - pct(d["latencies"], 0.5),
            "added_p99_ms": pct(r["latencies"], 0.99) - pct(d["latencies"], 0.99),
            "cpu_ms_per_request": cpu * 1000 / max(1, r["sent"]),
            "cpu_ms_by_process": cpu_by_process(before, after, r["sent"]),
            "errors": r["error_kinds"],
            **held_rate(url, stream, spec["key"], args.ramp, args.duration, args.spread)}
        split = "/".join(f"{x:.2f}" for x in out[kind]["cpu_ms_by_process"])
        print(f"{name:<12} {kind:<10} added P50 {out[kind]['added_p50_ms']:7.2f} ms  P99 "
              f"{out[kind]['added_p99_ms']:8.2f} ms  CPU {out[kind]['cpu_ms_per_request']:6.3f}"
              f" ms/req ({split})  held {out[kind]['held_rps']:6.0f}/s", flush=True)
    return out


def ratios(results: dict) -> dict:
    """Held-rate and CPU ratios of Inferplane to each peer that ran."""
    mine = results.get("inferplane")
    if not isinstance(mine, dict) or "skipped" in mine:
        return {}
    out = {}
    for peer, r in results.items():
        if peer == "inferplane" or "skipped" in r:
            continue
        for kind in ("non_stream", "stream"):
            theirs = r[kind]
            out[f"{kind} held rate inferplane/{peer}"] = (
                mine[kind]["held_rps"] / theirs["held_rps"] if theirs["held_rps"] else None)
            out[f"{kind} cpu/request {peer}/inferplane"] = (
                theirs["cpu_ms_per_request"] / mine[kind]["cpu_ms_per_request"])
    return out


def plot(results: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ran = [n for n, r in results.items() if "skipped" not in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, metric, title in zip(axes, ("held_rps", "added_p50_ms", "cpu_ms_per_request"),
                                 ("highest rate held (P99 ≤ 1 s), req/s", "added P50, ms",
                                  "CPU per proxied request, ms")):
        for i, kind in enumerate(("non_stream", "stream")):
            ax.bar([x + 0.4 * i for x in range(len(ran))],
                   [results[n][kind][metric] for n in ran], width=0.4, label=kind)
        ax.set_xticks([x + 0.2 for x in range(len(ran))], ran)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run(args) -> dict:
    logs = Path(tempfile.mkdtemp(prefix="gateway-peers-"))
    engine_port = free_port()
    engine = start([sys.executable, str(BENCH / "_mock_engine.py"), "--port", str(engine_port)],
                   f"http://127.0.0.1:{engine_port}/health", logs / "engine.log")
    direct_url = f"http://127.0.0.1:{engine_port}/v1/chat/completions"
    results: dict = {}
    try:
        direct = {("stream" if s else "non_stream"): load(direct_url, args.rate, args.duration,
                                                           s, SECRET, args.spread)
                  for s in (False, True)}
        for name, spec in gateways(Path(args.peers_dir), engine_port, logs,
                                       args.workers).items():
            if args.only and name not in args.only:
                continue
            if spec.get("skip"):
                results[name] = {"skipped": spec["skip"]}
                print(f"{name:<12} skipped: {spec['skip']}", flush=True)
                continue
            spec["proc"] = start(spec["cmd"], spec["health"], logs / f"{name}.log",
                                 spec.get("env"), cwd=spec.get("cwd"))
            if callable(spec["key"]):
                spec["key"] = spec["key"]()
            try:
                results[name] = measure(name, spec, direct, args)
            finally:
                spec["proc"].terminate()
                spec["proc"].wait(timeout=20)
    finally:
        engine.terminate()
        engine.wait(timeout=10)
    summary = ratios(results)
    for label, value in summary.items():
        print(f"  {label}: {'-' if value is None else f'{value:.2f}x'}")
    out = write_result("gateway_peers", {"rate": args.rate, "duration_s": args.duration,
                                         "ramp": args.ramp, "results": results,
                                         "ratios": summary}, args.output)
    print(f"result: {out}\nplot:   {plot(results, out.with_suffix('.png'))}\nlogs:   {logs}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=300.0, help="rate of the latency runs")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument("--ramp", type=lambda s: [float(x) for x in s.split(",")],
                        default=[100, 200, 400, 600, 800, 1000, 1500, 2000])
    parser.add_argument("--peers-dir", default=os.environ.get("INFERPLANE_PEERS_DIR",
                                                              "/work/peers-cache"))
    parser.add_argument("--only", type=lambda s: s.split(","), default=None)
    parser.add_argument("--output", default=None)
    parser.add_argument("--workers", type=int, default=1,
                        help="Inferplane gateway processes (vllm-router uses its own threads)")
    parser.add_argument("--spread", action="store_true",
                        help="the load generator uses every warm connection in turn (as many "
                             "clients would) instead of its hottest first: a multi-worker "
                             "gateway's work is then split evenly")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
