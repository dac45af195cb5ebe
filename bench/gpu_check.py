"""One-shot GPU check of the kernels and the engine: correctness, microbenchmarks, throughput.

    python bench/gpu_check.py [--out report.json] [--skip-e2e]
    python bench/gpu_check.py --smoke-cpu    # the same script at toy sizes, Triton interpreted

Sections (each recorded even when another fails; the report is rewritten after each one so
a run cut short still leaves results):
1. correctness: every Triton kernel against its torch reference at realistic shapes, bf16
   and fp16, including decode with one and many splits and prefill over a cached prefix;
2. microbenchmarks: decode attention achieved GB/s (K/V bytes read / time) against the HBM
   peak, torch SDPA on the same context gathered contiguous, prefill TFLOP/s, norm/MLP GB/s;
3. CUDA graphs: DecodeGraphs capture/replay of the decode attention step vs eager;
4. end to end: LLMEngine + ModelRunner on the real model in bf16: triton with decode CUDA
   graphs, triton eager, torch.
Writes JSON to --out, else $OUT/gpu_check.json, else ./gpu_check.json. Without a CUDA device
it says so, writes {"status": "no_cuda"} and exits 0. --smoke-cpu runs every section on CPU
tensors at toy sizes under the Triton interpreter (fp16, fp32 engine, graphs in `static`
mode), so the script itself is tested on machines without a GPU; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HBM_PEAK_GBS = 4800.0  # H200 HBM3e
DEADLINE_S = 450.0  # sections stop starting after this, to finish under 8 minutes
TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3}
START = time.monotonic()
DEV = "cuda"   # "cpu" with --smoke-cpu


def sizes(full: list, smoke: list) -> list:
    """The shapes a section runs: realistic on the GPU, toy ones in the CPU smoke run."""
    return full if DEV == "cuda" else smoke


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, iters: int = 20, warmup: int = 3) -> float:
    if DEV != "cuda":  # the smoke run: one timed call, on the host clock
        fn()
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1000
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / iters


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| / (1 + |b|): absolute near zero, relative for large values."""
    a, b = a.float(), b.float()
    return ((a - b).abs() / (1 + b.abs())).max().item()


def record(results: list, name: str, err: float, dtype: torch.dtype) -> None:
    results.append({"name": name, "dtype": str(dtype), "max_abs_err": err,
                    "ok": err <= TOL[dtype]})


# ---- 1. correctness ------------------------------------------------------------------------
def check_elementwise(results: list, dtype: torch.dtype) -> None:
    from builtin_engine.kernels import activation, layernorm, rotary
    from builtin_engine.kernels.kv_store import store_kv_torch, store_kv_triton
    dev = DEV
    for rows, hidden in sizes([(4096, 576), (2048, 4096)], [(8, 96)]):
        x = torch.randn(rows, hidden, device=dev, dtype=dtype)
        r = torch.randn_like(x)
        w = torch.rand(hidden, device=dev, dtype=dtype) + 0.5
        o1, r1 = layernorm.rms_norm_torch(x, w, 1e-5, r)
        o2, r2 = layernorm.rms_norm_triton(x, w, 1e-5, r)
        record(results, f"rms_norm_residual[{rows}x{hidden}]", max(max_err(o1, o2),
                                                                     max_err(r1, r2)), dtype)
    tokens = sizes([4096], [8])[0]
    for hq, hk, d in sizes([(9, 3, 64), (32, 8, 128)], [(9, 3, 64)]):
        cache = rotary.build_rope_cache(d, 8192, 1e5, dev)
        qkv = torch.randn(tokens, (hq + 2 * hk) * d, device=dev, dtype=dtype)
        pos = torch.randint(0, 8192, (tokens,), device=dev)
        a, b = qkv.clone(), qkv.clone()
        rotary.rotary_torch(a[:, :hq * d], a[:, hq * d:(hq + hk) * d], pos, cache)
        rotary.rotary_triton(b[:, :hq * d], b[:, hq * d:(hq + hk) * d], pos, cache)
        record(results, f"rotary[{hq}/{hk}x{d}]", max_err(a, b), dtype)
    for rows, inter in sizes([(4096, 1536), (1024, 14336)], [(8, 96)]):
        x = torch.randn(rows, 2 * inter, device=dev, dtype=dtype)
        record(results, f"silu_and_mul[{rows}x{inter}]", max_err(
            activation.silu_and_mul_torch(x), activation.silu_and_mul_triton(x)), dtype)
    blocks, stored = sizes([512, 2048], [4, 16])
    kc = torch.randn(blocks, 16, 8, 128, device=dev, dtype=dtype)
    vc = torch.randn_like(kc)
    kc2, vc2 = kc.clone(), vc.clone()
    key = torch.randn(stored, 8, 128, device=dev, dtype=dtype)
    value = torch.randn_like(key)
    slots = torch.randperm(blocks * 16, device=dev)[:stored]
    store_kv_torch(key, value, kc, vc, slots)
    store_kv_triton(key, value, kc2, vc2, slots)
    record(results, f"store_kv[{stored}x8x128]", max(max_err(kc, kc2), max_err(vc, vc2)), dtype)


def check_attention(results: list, dtype: torch.dtype) -> None:
    from builtin_engine.kernels.attention import paged_attention_torch
    from builtin_engine.kernels.decode_attention import paged_decode_attention_triton
    from builtin_engine.kernels.prefill_attention import paged_prefill_attention_triton
    from tests.builtin_engine.kernels.paged_case import make_case
    gen = torch.Generator().manual_seed(0)
    max_len, batch, q_max, prefix_max = sizes([4096, 48, 600, 1500], [40, 3, 8, 24])
    for hq, hk, d, bs in sizes([(9, 3, 64, 16), (32, 8, 128, 16), (32, 4, 128, 32),
                                (24, 8, 64, 5)], [(9, 3, 64, 5)]):
        lens = torch.randint(1, max_len, (batch,), generator=gen).tolist()
        case = make_case(lens, [1] * len(lens), bs, hq, hk, d, dtype, device=DEV)
        ref = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, d ** -0.5)
        for splits in (1, None, 16):
            out = paged_decode_attention_triton(case.q, case.k_cache, case.v_cache, case.meta,
                                                d ** -0.5, num_splits=splits)
            record(results, f"decode[{hq}/{hk}x{d},bs{bs},splits={splits or 'auto'}]",
                   max_err(out, ref), dtype)
        q_lens = torch.randint(1, q_max, (batch,), generator=gen).tolist()
        seq = [q + int(p) for q, p in zip(q_lens, torch.randint(0, prefix_max, (batch,),
                                                                   generator=gen))]
        case = make_case(seq, q_lens, bs, hq, hk, d, dtype, device=DEV)
        ref = paged_attention_torch(case.q, case.k_cache, case.v_cache, case.meta, d ** -0.5)
        out = paged_prefill_attention_triton(case.q, case.k_cache, case.v_cache, case.meta,
                                             d ** -0.5)
        record(results, f"prefill_cached_prefix[{hq}/{hk}x{d},bs{bs}]", max_err(out, ref), dtype)


# ---- 2. microbenchmarks --------------------------------------------------------------------
def bench_decode(rows: list) -> None:
    from builtin_engine.kernels.decode_attention import (choose_num_splits,
                                                         paged_decode_attention_triton)
    from tests.builtin_engine.kernels.paged_case import make_case
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float16
    for hq, hk, d, batch, ctx in sizes([(32, 8, 128, 1, 8192), (32, 8, 128, 32, 2048),
                                        (32, 8, 128, 64, 4096), (32, 8, 128, 128, 1024),
                                        (9, 3, 64, 64, 2048)], [(9, 3, 64, 2, 48)]):
        case = make_case([ctx] * batch, [1] * batch, 16, hq, hk, d, dtype, device=DEV)
        scale = d ** -0.5
        ms = time_ms(lambda: paged_decode_attention_triton(case.q, case.k_cache, case.v_cache,
                                                           case.meta, scale))
        kv_bytes = 2 * batch * ctx * hk * d * 2
        tables = case.meta.block_tables.long()
        k = case.k_cache[tables].flatten(1, 2).transpose(1, 2).contiguous()  # [B, Hk, S, D]
        v = case.v_cache[tables].flatten(1, 2).transpose(1, 2).contiguous()
        q = case.q.unsqueeze(2)  # [B, Hq, 1, D]
        sdpa_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, scale=scale,
                                                                 enable_gqa=True))
        gbs = kv_bytes / ms / 1e6
        rows.append({"kernel": "decode", "shape": f"B{batch} ctx{ctx} {hq}/{hk}x{d} {str(dtype)[6:]}",
                     "num_splits": choose_num_splits(batch, hk, ctx, case.q.device),
                     "ms": ms, "GB_s": gbs, "frac_of_hbm_peak": gbs / HBM_PEAK_GBS,
                     "sdpa_contiguous_ms": sdpa_ms, "speedup_vs_sdpa": sdpa_ms / ms})
        del case, k, v


def bench_prefill(rows: list) -> None:
    from builtin_engine.kernels.prefill_attention import paged_prefill_attention_triton
    from tests.builtin_engine.kernels.paged_case import make_case
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float16
    for hq, hk, d, batch, q_len, prefix in sizes([(32, 8, 128, 4, 2048, 0),
                                                  (32, 8, 128, 4, 512, 2048),
                                                  (9, 3, 64, 8, 1024, 0)], [(9, 3, 64, 1, 16, 0)]):
        seq = q_len + prefix
        case = make_case([seq] * batch, [q_len] * batch, 16, hq, hk, d, dtype, device=DEV)
        ms = time_ms(lambda: paged_prefill_attention_triton(case.q, case.k_cache, case.v_cache,
                                                            case.meta, d ** -0.5), iters=10)
        # causal FLOPs: 2 matmuls x 2 flops x visible (query, key) pairs x head_dim
        pairs = batch * (q_len * prefix + q_len * (q_len + 1) / 2)
        tflops = 4 * pairs * hq * d / ms / 1e9
        row = {"kernel": "prefill", "shape": f"B{batch} q{q_len} prefix{prefix} {hq}/{hk}x{d}",
               "ms": ms, "TFLOP_s": tflops}
        if prefix == 0:
            q = case.q.view(batch, q_len, hq, d).transpose(1, 2)
            k = torch.randn(batch, hk, seq, d, device=DEV, dtype=dtype)
            sdpa = time_ms(lambda: F.scaled_dot_product_attention(q, k, k, is_causal=True,
                                                                  enable_gqa=True), iters=10)
            row.update(sdpa_contiguous_ms=sdpa, speedup_vs_sdpa=sdpa / ms)
        rows.append(row)
        del case


def bench_elementwise(rows_out: list) -> None:
    from builtin_engine.kernels import activation, layernorm
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float16
    rows, hidden, inter = sizes([8192, 4096, 14336], [8, 64, 64])
    x = torch.randn(rows, hidden, device=DEV, dtype=dtype)
    r, w = torch.randn_like(x), torch.ones(hidden, device=DEV, dtype=dtype)
    for name, fn in [("triton", layernorm.rms_norm_triton), ("torch", layernorm.rms_norm_torch)]:
        ms = time_ms(lambda: fn(x, w, 1e-5, r))
        rows_out.append({"kernel": f"rms_norm_residual[{name}]", "shape": f"{rows}x{hidden}",
                     "ms": ms, "GB_s": 4 * x.numel() * 2 / ms / 1e6})
    g = torch.randn(rows, 2 * inter, device=DEV, dtype=dtype)
    for name, fn in [("triton", activation.silu_and_mul_triton),
                     ("torch", activation.silu_and_mul_torch)]:
        ms = time_ms(lambda: fn(g))
        rows_out.append({"kernel": f"silu_and_mul[{name}]", "shape": f"{rows}x2x{inter}",
                     "ms": ms, "GB_s": 1.5 * g.numel() * 2 / ms / 1e6})


# ---- 3. CUDA graphs ------------------------------------------------------------------------
def check_cuda_graphs(report: dict) -> None:
    from builtin_engine.kernels.attention import AttentionMetadata
    from builtin_engine.kernels.cuda_graphs import DecodeGraphs
    from builtin_engine.kernels.decode_attention import paged_decode_attention_triton
    from tests.builtin_engine.kernels.paged_case import make_case
    max_b, ctx = sizes([32, 1024], [8, 40])
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float16
    case = make_case([ctx] * max_b, [1] * max_b, 16, 32, 8, 128, dtype, device=DEV)
    base = case.meta

    def step(b: int) -> torch.Tensor:
        meta = AttentionMetadata(base.slot_mapping[:b], base.query_start_loc[:b + 1],
                                 base.seq_lens[:b], base.block_tables[:b], [1] * b, [ctx] * b,
                                 1, ctx)
        return paged_decode_attention_triton(case.q[:b], case.k_cache, case.v_cache, meta,
                                             0.088)

    graphs = DecodeGraphs([1, 8, max_b], DEV, pad_eagerly=DEV != "cuda")
    graphs.capture(step)
    eager = step(5).clone()
    base.seq_lens[5:8] = 0  # padded rows of the size-8 graph
    replayed = graphs.run(5, step).clone()
    base.seq_lens[5:8] = ctx
    report["cuda_graphs"] = {
        "captured": graphs.captured_sizes, "max_abs_err_replay_vs_eager": max_err(eager, replayed),
        "eager_ms_max_batch": time_ms(lambda: step(max_b)),
        "replay_ms_max_batch": time_ms(lambda: graphs.run(max_b, step))}


# ---- 4. end to end -------------------------------------------------------------------------
def run_engine(backend: str, graphs: str, prompts: list[list[int]], max_tokens: int) -> dict:
    from builtin_engine.core.config import EngineConfig
    from builtin_engine.core.llm_engine import LLMEngine
    from builtin_engine.core.sampling_params import SamplingParams
    from builtin_engine.loader import load_model
    from builtin_engine.runner.model_runner import ModelRunner
    cfg = EngineConfig(device=DEV, dtype="bfloat16" if DEV == "cuda" else "float32",
                       kernels=backend if DEV == "cuda" else "torch",  # smoke: time
                       attention_backend=backend, num_blocks=sizes([8192], [64])[0],
                       max_num_seqs=64,
                       max_num_batched_tokens=4096, swap_space_gib=0.0, decode_graphs=graphs)
    t0 = time.monotonic()
    loaded = load_model(cfg)
    engine = LLMEngine(cfg, ModelRunner(cfg, loaded), loaded.tokenizer)
    load_s = time.monotonic() - t0
    if DEV == "cuda":  # warm-up (Triton compiles); the smoke run has no time for it
        engine.generate([prompts[0][:16]], SamplingParams(max_tokens=2, temperature=0))
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    sync()
    t0 = time.monotonic()
    results = engine.generate(prompts, params)
    elapsed = time.monotonic() - t0
    outputs = [results[str(i)].new_token_ids for i in range(len(prompts))]
    sample = ""
    if DEV == "cuda":  # a readable answer, to see that bf16 on the GPU still makes sense
        chat = loaded.tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is the capital of France?"}])
        ids = engine.generate([loaded.tokenizer.encode(chat)],
                              SamplingParams(max_tokens=24, temperature=0))["0"].new_token_ids
        sample = loaded.tokenizer.decode(ids)
    generated = sum(len(o) for o in outputs)
    return {"backend": backend, "decode_graphs": graphs, "load_s": load_s, "elapsed_s": elapsed,
            "requests": len(prompts), "output_tokens": generated,
            "output_tok_s": generated / elapsed,
            "total_tok_s": (generated + sum(map(len, prompts))) / elapsed,
            "sample_text": sample, "_outputs": outputs}


def check_e2e(report: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    count, low, high, new_tokens = sizes([64, 128, 512, 128], [2, 6, 12, 2])
    prompts = [torch.randint(100, 40000, (int(n),), generator=gen).tolist()
               for n in torch.randint(low, high, (count,), generator=gen)]
    graphs = "auto" if DEV == "cuda" else "static"  # static: the graph path without capture
    runs = [run_engine(b, g, prompts, new_tokens)
            for b, g in (("triton", graphs), ("triton", "off"), ("torch", "off"))]
    a, graphs_off, b = (run.pop("_outputs") for run in runs)
    same_prefix = [next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), len(p))
                   for p, q in zip(a, b)]
    report["e2e"] = {"runs": runs, "greedy_identical_requests": sum(
        s == len(p) for s, p in zip(same_prefix, a)),
        "mean_tokens_before_divergence": sum(same_prefix) / len(same_prefix),
        "graphs_vs_eager_identical_requests": sum(x == y for x, y in zip(a, graphs_off)),
        "graphs_speedup": runs[0]["output_tok_s"] / runs[1]["output_tok_s"]}


# ---- driver --------------------------------------------------------------------------------
def section(report: dict, name: str, fn, out: Path) -> None:
    if time.monotonic() - START > DEADLINE_S:
        report["skipped"].append(f"{name}: time budget spent")
        return
    t0 = time.monotonic()
    try:
        fn()
    except Exception as exc:  # recorded, and the next section still runs
        report["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
    report["section_s"][name] = round(time.monotonic() - t0, 2)
    if DEV == "cuda":
        torch.cuda.empty_cache()
    out.write_text(json.dumps(report, indent=2))
    print(f"[{time.monotonic() - START:6.1f}s] {name} done", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--smoke-cpu", action="store_true",
                        help="toy sizes on CPU through the Triton interpreter (tests the script)")
    args = parser.parse_args()
    out = args.out or Path(os.environ.get("OUT", ".")) / "gpu_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    global DEV
    if args.smoke_cpu:
        DEV = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"  # read once, when triton is first imported
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device available; nothing to check", file=sys.stderr)
        out.write_text(json.dumps({"status": "no_cuda"}))
        return 0
    props = torch.cuda.get_device_properties(0) if DEV == "cuda" else None
    report = {"status": "ran" if props else "smoke_cpu", "device": props.name if props else "cpu",
              "sms": props.multi_processor_count if props else 0,
              "torch": torch.__version__, "correctness": [], "bench": [], "errors": {},
              "skipped": [], "section_s": {}}
    try:
        import triton
        report["triton"] = triton.__version__
    except ImportError as exc:
        report["errors"]["import"] = f"triton is not importable: {exc}"
    for dtype in (torch.bfloat16, torch.float16) if DEV == "cuda" else (torch.float16,):
        section(report, f"elementwise_{dtype}",
                lambda d=dtype: check_elementwise(report["correctness"], d), out)
        section(report, f"attention_{dtype}",
                lambda d=dtype: check_attention(report["correctness"], d), out)
    section(report, "bench_decode", lambda: bench_decode(report["bench"]), out)
    section(report, "bench_prefill", lambda: bench_prefill(report["bench"]), out)
    section(report, "bench_elementwise", lambda: bench_elementwise(report["bench"]), out)
    section(report, "cuda_graphs", lambda: check_cuda_graphs(report), out)
    if not args.skip_e2e:
        section(report, "e2e", lambda: check_e2e(report), out)
    report["all_correct"] = all(r["ok"] for r in report["correctness"]) and not report["errors"]
    report["total_s"] = round(time.monotonic() - START, 1)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("all_correct", "errors", "skipped", "total_s")}))
    return 0 if report["all_correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
