"""Instructions a proxied request costs the default gateway's event loop, counted by callgrind:
repeatable to a few percent where CPU seconds on a shared 2-core host swing ±15%.

    inferplane bench gateway_instructions [--requests 300] [--rounds 2] [--stream]
        [--tree DIR ...]

`inferplane up --workers 1` with the minimal config of `gateway_peers` (one OpenAI-compatible
backend: the mock engine of bench/_mock_engine.py) runs under `valgrind --tool=callgrind
--instr-atstart=no --separate-threads=yes`. After 30 warm-up requests instrumentation goes on
(`callgrind_control -i on`) for --requests sequential requests and off again, then on again
for as long with no requests: the event-loop thread's count of the first window less the
second's (its timers: registry and load polls, the loop monitor), over the request count, is
the figure. The other threads (the usage writer's, in both windows: the idle one writes the
requests' last records) are given apart: their share depends on how records batch up in time.
Each --tree is the root of a checkout whose `up` runs (PYTHONPATH), the trees taking turns
--rounds times, so a change and its parent are counted in one run; ratios are printed against
the first tree. Instructions are not seconds (cache misses and the kernel's socket work are not
in them): use them to compare changes to the Python path, `gateway_peers` for what a request
costs.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import log, write_result  # noqa: E402
from bench.gateway_overhead import BENCH, free_port  # noqa: E402
from bench.gateway_peers import start, up_default  # noqa: E402

WARM_UP = 30
BODY = {"model": "mock", "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 16}


def _totals(pattern: str) -> int:
    """Sum of the `totals:` lines of the callgrind dumps matching `pattern`."""
    return sum(int(line.split()[1]) for path in glob.glob(pattern) for line in open(path)
               if line.startswith("totals:"))


def _send(client: httpx.Client, url: str, key: str, stream: bool) -> None:
    headers = {"authorization": f"Bearer {key}"}
    if not stream:
        response = client.post(url, json=BODY, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"the gateway answered {response.status_code}: {response.text}")
        return
    with client.stream("POST", url, json={**BODY, "stream": True}, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"the gateway answered {response.status_code}")
        for _ in response.iter_bytes():
            pass


def count(tree: Path, engine_port: int, work: Path, requests: int, stream: bool) -> dict:
    """Instructions per request of one `up` of `tree`: event loop and other threads."""
    spec = up_default(engine_port, work / "up", 1)
    dumps = work / "callgrind"
    dumps.mkdir(parents=True)
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
           "--dump-instr=no", f"--callgrind-out-file={dumps}/cg.%p", *spec["cmd"]]
    log(f"  starting `up` of {tree} under callgrind")
    proc = start(cmd, spec["health"], work / "up.log", env={"PYTHONPATH": str(tree)},
                 cwd=spec["cwd"], timeout=600)
    url = f"http://127.0.0.1:{spec['port']}/v1/chat/completions"
    try:
        key = spec["key"]()
        with httpx.Client(trust_env=False, timeout=120) as client:
            for _ in range(WARM_UP):
                _send(client, url, key, stream)
            time.sleep(1.0)   # the warm-up's usage batch is written before counting starts
            with _counting(proc.pid):
                started = time.monotonic()
                for _ in range(requests):
                    _send(client, url, key, stream)
                took = time.monotonic() - started
            log(f"  {requests} requests in {took:.1f} s under callgrind; then as long idle")
            with _counting(proc.pid):
                time.sleep(took)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    busy, idle = (_totals(f"{dumps}/cg.{proc.pid}.{part}-01") for part in (1, 2))
    everything = [_totals(f"{dumps}/cg.{proc.pid}.{part}-*") for part in (1, 2)]
    # The other threads' work in the idle window is mostly writing the requests' usage: theirs.
    return {"loop": (busy - idle) / requests,
            "other_threads": (everything[0] - busy + everything[1] - idle) / requests}


@contextlib.contextmanager
def _counting(pid: int):
    """Instrumentation on for the block, then one dump (`cg.<pid>.<n>-<thread>`)."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True,
                       capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)


def plot(results: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    fig, ax = plt.subplots(figsize=(2.5 + 2 * len(names), 4))
    medians = [statistics.median(r["loop"]) / 1e6 for r in results.values()]
    bars = ax.bar(names, medians)
    ax.bar_label(bars, labels=[f"{m:.3f} M ({m / medians[0]:.3f}x)" for m in medians])
    ax.set_ylabel("event-loop instructions per request (millions)")
    ax.set_title("gateway_instructions (median of rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run(args) -> dict:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed (Debian package `valgrind`)")
    trees = [Path(t).resolve() for t in (args.tree or [ROOT])]
    work = Path(tempfile.mkdtemp(prefix="gateway-instructions-"))
    engine_port = free_port()
    engine = start([sys.executable, str(BENCH / "_mock_engine.py"), "--port", str(engine_port)],
                   f"http://127.0.0.1:{engine_port}/health", work / "engine.log")
    results = {str(t): {"loop": [], "other_threads": []} for t in trees}
    order = [tree for i in range(args.rounds) for tree in (trees if i % 2 == 0 else trees[::-1])]
    try:
        for n, tree in enumerate(order):
            got = count(tree, engine_port, work / f"run{n}", args.requests, args.stream)
            for field, value in got.items():
                results[str(tree)][field].append(value)
            print(f"run {n + 1}  {tree}: {got['loop'] / 1e6:.3f} M instructions a request in "
                  f"the event loop, {got['other_threads'] / 1e6:.3f} M in other threads",
                  flush=True)
    finally:
        engine.terminate()
        engine.wait(timeout=10)
    first = statistics.median(results[str(trees[0])]["loop"])
    for tree, r in results.items():
        median = statistics.median(r["loop"])
        print(f"{tree}: median {median / 1e6:.3f} M ({median / first:.3f}x the first tree)")
    out = write_result("gateway_instructions", {
        "requests": args.requests, "stream": args.stream, "rounds": args.rounds,
        "results": results}, args.output)
    print(f"result: {out}\nplot:   {plot(results, out.with_suffix('.png'))}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="counted requests per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per tree, taking turns")
    parser.add_argument("--stream", action="store_true", help="streamed chat completions")
    parser.add_argument("--tree", action="append",
                        help="a checkout's root to run `up` from (repeat to compare; default: "
                             "this one)")
    parser.add_argument("--output", default=None)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
