"""Request sets for `inferplane bench serve`: synthetic lengths, shared-prefix multi-tenant, and
ShareGPT-format JSON files.

    prompts = synthetic(tokenizer, n=200, input_len=128, output_len=64, range_ratio=0.2, seed=0)
    prompts = shared_prefix(tokenizer, n=200, tenants=8, prefix_len=512, suffix_len=64,
                            output_len=64, seed=0)
    prompts = sharegpt("ShareGPT_V3.json", tokenizer, n=200, seed=0)

Every prompt carries its length in tokens of the given tokenizer, so throughput can be counted
even when an endpoint does not report usage. Texts are built from real English words so their
token statistics resemble chat traffic; nothing is downloaded.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from bench._common import text_tokens


@dataclass(frozen=True)
class BenchPrompt:
    text: str
    prompt_tokens: int
    max_tokens: int
    tenant: str = ""  # the shared prefix it belongs to ("" when none)


def _text(tokenizer, rng: random.Random, num_tokens: int) -> tuple[str, int]:
    text = tokenizer.decode(text_tokens(tokenizer, rng, num_tokens))
    return text, len(tokenizer.encode(text))


def _around(rng: random.Random, centre: int, range_ratio: float) -> int:
    """A length uniformly within centre × (1 ± range_ratio), at least 1."""
    lo, hi = int(centre * (1 - range_ratio)), int(centre * (1 + range_ratio))
    return max(1, rng.randint(lo, max(lo, hi)))


def synthetic(tokenizer, n: int, input_len: int, output_len: int, range_ratio: float = 0.0,
              seed: int = 0) -> list[BenchPrompt]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        text, length = _text(tokenizer, rng, _around(rng, input_len, range_ratio))
        prompts.append(BenchPrompt(text, length, _around(rng, output_len, range_ratio)))
    return prompts


def shared_prefix(tokenizer, n: int, tenants: int, prefix_len: int, suffix_len: int,
                  output_len: int, seed: int = 0) -> list[BenchPrompt]:
    """n requests spread round-robin over `tenants` system prefixes (each prefix_len tokens),
    each followed by its own suffix: the workload cache-aware routing is meant for."""
    rng = random.Random(seed)
    prefixes = [_text(tokenizer, rng, prefix_len)[0] for _ in range(tenants)]
    order = [i % tenants for i in range(n)]
    rng.shuffle(order)
    prompts = []
    for tenant in order:
        suffix, _ = _text(tokenizer, rng, suffix_len)
        text = prefixes[tenant] + "\n\n" + suffix
        prompts.append(BenchPrompt(text, len(tokenizer.encode(text)), output_len,
                                   tenant=f"tenant-{tenant}"))
    return prompts


def sharegpt(path: str | Path, tokenizer, n: int, seed: int = 0, output_len: int | None = None,
             max_prompt_tokens: int = 1024, max_output_tokens: int = 1024) -> list[BenchPrompt]:
    """The first human turn of each conversation as the prompt and the reply's length as
    max_tokens (or output_len), sampled like vLLM's benchmark: conversations with fewer than
    two turns, or prompts/replies out of range, are skipped."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of conversations")
    rng = random.Random(seed)
    rng.shuffle(data)
    prompts = []
    for entry in data:
        turns = entry.get("conversations") or entry.get("conversation") or []
        if len(turns) < 2:
            continue
        text, reply = str(turns[0].get("value", "")), str(turns[1].get("value", ""))
        prompt_tokens = len(tokenizer.encode(text))
        wanted = output_len or len(tokenizer.encode(reply))
        if not (4 <= prompt_tokens <= max_prompt_tokens and 4 <= wanted <= max_output_tokens):
            continue
        prompts.append(BenchPrompt(text, prompt_tokens, wanted))
        if len(prompts) == n:
            break
    if not prompts:
        raise ValueError(f"{path}: no usable conversations (need a human turn and a reply)")
    return prompts


def build(args, tokenizer) -> list[BenchPrompt]:
    """The dataset named by the command line (see bench/serve.py for the flags)."""
    total = args.num_prompts + args.warmup
    if args.dataset == "synthetic":
        return synthetic(tokenizer, total, args.input_len, args.output_len, args.range_ratio,
                         args.seed)
    if args.dataset == "shared-prefix":
        return shared_prefix(tokenizer, total, args.tenants, args.prefix_len, args.input_len,
                             args.output_len, args.seed)
    if args.dataset == "sharegpt":
        if not args.dataset_path:
            raise SystemExit("--dataset sharegpt needs --dataset-path FILE.json")
        return sharegpt(args.dataset_path, tokenizer, total, args.seed,
                        output_len=args.sharegpt_output_len)
    raise SystemExit(f"unknown dataset {args.dataset!r}")
