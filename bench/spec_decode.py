"""n-gram speculative decoding: single-stream decode speed with and without, same run.

    python bench/spec_decode.py [--num-prompts 4] [--article-tokens 200] [--max-tokens 128]
                                [--ngram 3] [--k 5] [--dtype auto] [--threads 2]
                                [--compile | --no-compile]

Summarisation-style workload: each prompt holds an article of real English words and asks
for it back, so the greedy answer copies long runs of the prompt, the case prompt lookup is
for. Each prompt runs alone (one stream), first without speculation, then with it, over the
same loaded weights. Decode speed is output tokens after the first / (last token time -
first token time), so prefill does not count. Both runs must produce identical greedy text;
the ratio is of the two measured speeds (the host may be shared: only the ratio is stable).
"""
from __future__ import annotations

import argparse
import random
import time

import _common as c

GOAL = 1.5


def prompts(tokenizer, n: int, article_tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        article = tokenizer.decode(c.text_tokens(tokenizer, rng, article_tokens))
        first = " ".join(article.split()[:4])
        out.append(tokenizer.encode(f"Article: {article}\nRepeat the article above word for "
                                    f"word.\nArticle: {first}"))
    return out


def decode_one(engine, prompt: list[int], max_tokens: int) -> dict:
    from builtin_engine.core.sampling_params import SamplingParams
    engine.add_request("r", prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0,
                                                   ignore_eos=True))
    tokens, times, steps = [], [], 0
    start = time.perf_counter()
    while engine.has_unfinished():
        for o in engine.step():
            if o.error:
                raise RuntimeError(o.error)
            if o.new_token_ids:
                tokens.extend(o.new_token_ids)
                times.append(time.perf_counter())
        steps += 1
    decode_s = times[-1] - times[0]
    return {"tokens": tokens, "ttft_s": times[0] - start, "decode_s": decode_s, "steps": steps,
            "decode_tokens_per_s": (len(tokens) - 1) / decode_s if decode_s > 0 else 0.0}


def spec_counts(engine) -> dict:
    m = engine.metrics.spec
    return {"drafts": m.drafts._value.get(), "draft_tokens": m.draft_tokens._value.get(),
            "accepted_tokens": m.accepted._value.get(),
            "accepted_per_pos": [p._value.get() for p in m.per_pos]}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-prompts", type=int, default=4)
    p.add_argument("--article-tokens", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--ngram", type=int, default=3)
    p.add_argument("--k", type=int, default=5, help="speculative tokens per step")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--compile", default=None, action=argparse.BooleanOptionalAction,
                   help="compiled decode step for both sides (default: the device's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="JSON result path (default bench/results/)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    c.set_threads(args.threads)
    plain_cfg = c.engine_config(dtype=args.dtype, num_blocks=256, compile=args.compile)
    spec_cfg = c.engine_config(dtype=args.dtype, num_blocks=256, speculative_ngram=args.ngram,
                               num_speculative_tokens=args.k, compile=args.compile)
    loaded, _ = c.load_builtin(plain_cfg)
    tok = loaded.tokenizer
    items = prompts(tok, args.num_prompts, args.article_tokens, args.seed)
    plain, spec = c.new_engine(plain_cfg, loaded), c.new_engine(spec_cfg, loaded)
    c.warm_up(plain, tok)
    c.warm_up(spec, tok)
    rows = []
    for i, prompt in enumerate(items):
        a = decode_one(plain, prompt, args.max_tokens)
        b = decode_one(spec, prompt, args.max_tokens)
        rows.append({"prompt_tokens": len(prompt), "plain": a, "spec": b,
                     "identical": a["tokens"] == b["tokens"]})
        c.log(f"prompt {i}: plain {a['decode_tokens_per_s']:.1f} tok/s, speculative "
              f"{b['decode_tokens_per_s']:.1f} tok/s, identical={rows[-1]['identical']}")
    totals = {}
    for side in ("plain", "spec"):
        tokens = sum(len(r[side]["tokens"]) - 1 for r in rows)
        seconds = sum(r[side]["decode_s"] for r in rows)
        totals[side] = {"decode_tokens": tokens, "decode_s": seconds,
                        "decode_tokens_per_s": tokens / seconds,
                        "steps": sum(r[side]["steps"] for r in rows)}
    counts = spec_counts(spec)
    result = {"threads": args.threads, "dtype": plain_cfg.dtype,
              "compiled": plain_cfg.resolved_compile()[0], "ngram": args.ngram,
              "k": args.k, "max_tokens": args.max_tokens, "totals": totals,
              "speedup": totals["spec"]["decode_tokens_per_s"]
              / totals["plain"]["decode_tokens_per_s"],
              "identical": sum(r["identical"] for r in rows), "num_prompts": len(rows),
              "acceptance_rate": counts["accepted_tokens"] / max(counts["draft_tokens"], 1),
              "mean_accepted_length": 1 + counts["accepted_tokens"] / max(counts["drafts"], 1),
              "spec_metrics": counts,
              "prompts": [{k: v for k, v in r.items() if k not in ("plain", "spec")}
                          | {s: {k: v for k, v in r[s].items() if k != "tokens"}
                             for s in ("plain", "spec")} for r in rows]}
    path = c.write_result("spec_decode", result, args.output)
    report(result, path)
    return result


def report(result: dict, path) -> None:
    t, s = result["totals"], result["speedup"]
    print(f"command: {c.command_line()}")
    print(f"single-stream greedy decode, {result['num_prompts']} summarisation prompts, "
          f"{result['max_tokens']} tokens each, {result['dtype']}, threads={result['threads']}")
    print(f"plain            : {t['plain']['decode_tokens_per_s']:7.1f} tok/s "
          f"({t['plain']['steps']} steps)")
    print(f"n-gram n={result['ngram']} k={result['k']}: {t['spec']['decode_tokens_per_s']:7.1f} "
          f"tok/s ({t['spec']['steps']} steps)  -> {s:.2f}x (goal >= {GOAL:g}x: "
          f"{'met' if s >= GOAL else 'NOT met'})")
    print(f"acceptance rate {result['acceptance_rate']:.2f}, mean accepted length "
          f"{result['mean_accepted_length']:.2f}; identical greedy text: "
          f"{result['identical']}/{result['num_prompts']}")
    print(f"result file: {path}")


if __name__ == "__main__":
    main()
