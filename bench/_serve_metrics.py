"""Figures of one `inferplane bench serve` run, computed from its request records.

    summary = summarize(records, duration_s=42.0, slos={"ttft": 500.0, "tpot": 50.0})
    summary["ttft_ms"]["p99"], summary["goodput_rps"], summary["errors"]

Latencies are reported in milliseconds at P50/P90/P99 (and mean), throughput per second of
the run's wall time (first send to last reply). Goodput counts the requests that met every
given SLO (milliseconds on ttft, tpot, itl — its worst gap — and e2el), as in vLLM's benchmark.
"""
from __future__ import annotations

from collections import Counter

from bench._common import percentile
from bench._serve_client import RequestRecord

QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
SLO_NAMES = ("ttft", "tpot", "itl", "e2el")


def distribution(values_s: list[float]) -> dict[str, float]:
    """P50/P90/P99/mean in milliseconds of values given in seconds (NaN when empty)."""
    ms = [v * 1000.0 for v in values_s]
    out = {name: percentile(ms, q) for name, q in QUANTILES.items()}
    out["mean"] = sum(ms) / len(ms) if ms else float("nan")
    return out


def _slo_value_ms(record: RequestRecord, name: str) -> float | None:
    if name == "ttft":
        return None if record.ttft is None else record.ttft * 1000
    if name == "tpot":
        return None if record.tpot is None else record.tpot * 1000
    if name == "itl":
        return max(record.itl) * 1000 if record.itl else 0.0
    return None if record.e2e is None else record.e2e * 1000


def meets(record: RequestRecord, slos: dict[str, float]) -> bool:
    if not record.ok:
        return False
    for name, limit_ms in slos.items():
        value = _slo_value_ms(record, name)
        if value is not None and value > limit_ms:
            return False
    return True


def parse_slos(items: list[str] | None) -> dict[str, float]:
    """['ttft:500', 'tpot:50'] -> {'ttft': 500.0, 'tpot': 50.0}; names checked."""
    slos = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in SLO_NAMES or not value:
            raise SystemExit(f"--goodput takes NAME:MS with NAME in {', '.join(SLO_NAMES)}; "
                             f"got {item!r}")
        slos[name] = float(value)
    return slos


def summarize(records: list[RequestRecord], duration_s: float,
              slos: dict[str, float] | None = None) -> dict:
    ok = [r for r in records if r.ok]
    output_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    duration_s = max(duration_s, 1e-9)
    return {
        "requests": len(records), "completed": len(ok),
        "errors": dict(Counter(r.error for r in records if not r.ok)),
        "duration_s": duration_s,
        "request_throughput_rps": len(ok) / duration_s,
        "output_throughput_tps": output_tokens / duration_s,
        "total_token_throughput_tps": (output_tokens + prompt_tokens) / duration_s,
        "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
        "ttft_ms": distribution([r.ttft for r in ok if r.ttft is not None]),
        "tpot_ms": distribution([r.tpot for r in ok if r.tpot is not None]),
        "itl_ms": distribution([gap for r in ok for gap in r.itl]),
        "e2el_ms": distribution([r.e2e for r in ok if r.e2e is not None]),
        "slos_ms": dict(slos or {}),
        "goodput_rps": sum(meets(r, slos or {}) for r in records) / duration_s,
    }


def throughput_over_time(records: list[RequestRecord], bin_s: float = 1.0) -> list[tuple]:
    """(bin start, completed requests/s, output tokens/s) per bin of completion times."""
    ends = [(r.start + r.e2e, r.output_tokens) for r in records if r.ok and r.e2e is not None]
    if not ends:
        return []
    bins: dict[int, list[int]] = {}
    for end, tokens in ends:
        slot = bins.setdefault(int(end // bin_s), [0, 0])
        slot[0] += 1
        slot[1] += tokens
    last = max(bins)
    return [(k * bin_s, bins.get(k, [0, 0])[0] / bin_s, bins.get(k, [0, 0])[1] / bin_s)
            for k in range(last + 1)]
