"""Shared pieces of the engine benchmarks: workloads, model loading, timing, result files.

Workloads are ShareGPT-like but built offline: seeded log-normal prompt and output lengths,
prompts made of real English words tokenised with the engine tokenizer, so the numbers are
reproducible from the seed alone and nothing is downloaded.
"""
from __future__ import annotations

import json
import math
import os
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/x.py` from anywhere
    sys.path.insert(0, str(ROOT))

MODEL = "smollm2-135m-instruct"
RESULTS_DIR = ROOT / "bench" / "results"

# Word source for prompts: plain English prose, so token statistics resemble chat text.
TEXT = """
The history of computing is a story of people trying to make machines do work that used to
take a great deal of human time. Early mechanical calculators could add and multiply, but each
problem had to be set up by hand. When engineers learned to store the program in the same
memory as the data, a single machine could switch from one task to another in a moment. Since
then, every generation of hardware has been faster, smaller and cheaper than the one before,
and software has grown to fill the space. Today a phone in your pocket holds more memory than
the computers that guided the first missions to the moon. Please explain how a cache works,
why a hash table is fast, and what happens when two requests want the same resource at the
same time. Write a short story about a lighthouse keeper who finds a message in a bottle, and
describe the weather, the sound of the waves and the smell of salt in the air. Give me three
tips for learning a new language, a recipe for bread with only four ingredients, and a list of
questions to ask before buying a used car. What is the difference between a virus and a
bacterium? How do airplanes stay in the air, and why do clouds form over mountains in the
afternoon? Summarize the main causes of the industrial revolution in simple words for a
student who has never studied economics, then suggest a few books for further reading.
"""
WORDS = TEXT.split()


@dataclass
class WorkItem:
    prompt_ids: list[int]
    max_tokens: int


def lognormal_lengths(rng: random.Random, n: int, median: float, sigma: float,
                      lo: int, hi: int) -> list[int]:
    return [min(hi, max(lo, round(rng.lognormvariate(math.log(median), sigma))))
            for _ in range(n)]


def text_tokens(tokenizer, rng: random.Random, num_tokens: int) -> list[int]:
    """Exactly num_tokens ids of real text: random word runs from TEXT, tokenised, cut."""
    ids: list[int] = []
    while len(ids) < num_tokens:
        start = rng.randrange(len(WORDS))
        run = WORDS[start:start + rng.randint(8, 40)]
        ids.extend(tokenizer.encode(" ".join(run) + " "))
    return ids[:num_tokens]


def sharegpt_like(tokenizer, num_requests: int, seed: int, prompt_median: int = 100,
                  output_median: int = 100, prompt_range=(16, 512),
                  output_range=(8, 256), prefix: list[int] | None = None) -> list[WorkItem]:
    rng = random.Random(seed)
    prompt_lens = lognormal_lengths(rng, num_requests, prompt_median, 0.8, *prompt_range)
    output_lens = lognormal_lengths(rng, num_requests, output_median, 0.7, *output_range)
    head = list(prefix or [])
    return [WorkItem(head + text_tokens(tokenizer, rng, p), o)
            for p, o in zip(prompt_lens, output_lens)]


def describe(items: list[WorkItem]) -> dict:
    prompts = sorted(len(w.prompt_ids) for w in items)
    outputs = sorted(w.max_tokens for w in items)
    return {"num_requests": len(items),
            "prompt_tokens": sum(prompts), "output_tokens": sum(outputs),
            "prompt_median": prompts[len(prompts) // 2], "prompt_max": prompts[-1],
            "output_median": outputs[len(outputs) // 2], "output_max": outputs[-1]}


# ---- process setup -----------------------------------------------------------------------
def set_threads(n: int) -> None:
    import torch
    torch.set_num_threads(n)
    os.environ["INFERPLANE_THREADS"] = str(n)  # the model runner applies it again


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


def engine_config(**overrides):
    from builtin_engine.core.config import EngineConfig
    base = dict(model=MODEL, device="cpu", dtype="float32", swap_space_gib=0.0)
    base.update(overrides)
    return EngineConfig(**base)


def load_builtin(config):
    """(LoadedModel, ModelRunner); the weights are loaded once and shared by every engine."""
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner
    loaded = load_model(config)
    return loaded, ModelRunner(config, loaded)


def new_engine(config, loaded):
    """A fresh LLMEngine (own scheduler and KV cache) over already-loaded weights."""
    from builtin_engine.core.llm_engine import LLMEngine
    from builtin_engine.runner.model_runner import ModelRunner
    return LLMEngine(config, ModelRunner(config, loaded), loaded.tokenizer)


def load_hf():
    """SmolLM2 from the same GGUF through transformers, fp32, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from builtin_engine.loader import resolve_model
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    path = resolve_model(MODEL).path
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32)
    return model.eval()


# ---- running the builtin engine ----------------------------------------------------------
@dataclass
class EngineRun:
    elapsed_s: float
    output_tokens: int
    ttft_s: list[float]  # per request, from submission to its first token
    outputs: dict[str, list[int]]
    steps: int
    cpu_s: float  # process CPU time: less sensitive than wall time to other load on the host


def run_engine(engine, items: list[WorkItem], on_step=None) -> EngineRun:
    """Submit every item at once (greedy, ignore_eos) and step until all finish."""
    from builtin_engine.core.sampling_params import SamplingParams
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, w in enumerate(items):
        engine.add_request(str(i), w.prompt_ids,
                           SamplingParams(max_tokens=w.max_tokens, temperature=0.0,
                                          ignore_eos=True))
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(items))}
    first: dict[str, float] = {}
    steps = 0
    while engine.has_unfinished():
        step_out = engine.step()
        steps += 1
        now = time.perf_counter()
        for o in step_out:
            if o.error:
                raise RuntimeError(f"request {o.request_id} failed: {o.error}")
            if o.new_token_ids and o.request_id not in first:
                first[o.request_id] = now - start
            outputs[o.request_id].extend(o.new_token_ids)
        if on_step is not None:
            on_step(engine)
    elapsed = time.perf_counter() - start
    produced = sum(len(v) for v in outputs.values())
    expected = sum(w.max_tokens for w in items)
    if produced != expected:
        raise RuntimeError(f"engine produced {produced} tokens, expected {expected}")
    return EngineRun(elapsed, produced, [first[str(i)] for i in range(len(items))], outputs, steps,
                     time.process_time() - cpu_start)


def warm_up(engine, tokenizer) -> None:
    """One short request so one-time costs (allocator, kernels' first calls) are not timed."""
    run_engine(engine, sharegpt_like(tokenizer, 2, seed=12345, output_range=(4, 4)))


# ---- reporting ---------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def write_result(name: str, payload: dict, path: str | None = None) -> Path:
    target = Path(path) if path else RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "command": command_line(), "cpu_count": os.cpu_count(),
               **payload}
    target.write_text(json.dumps(payload, indent=2, default=_jsonable))
    return target


def _jsonable(obj):
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc, timeout: float = 120) -> None:
    """Until `url` answers below 500; RuntimeError if `proc` (a Popen) exits first."""
    import httpx
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)
