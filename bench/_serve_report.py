"""Tables and plots of `inferplane bench serve` runs, alone or side by side.

    print(table([("run", summary)]))
    plot_run(records, summary, "bench/results/serve-….png")
    plot_compare([("a", result_a), ("b", result_b)], "bench/results/compare-….png")

The first run of a comparison is the baseline: every other column shows its ratio to it.
"""
from __future__ import annotations

import math
from pathlib import Path

ROWS = [  # (label, summary path, format)
    ("completed", ("completed",), "{:.0f}"),
    ("errors", ("errors",), None),
    ("req/s", ("request_throughput_rps",), "{:.2f}"),
    ("output tok/s", ("output_throughput_tps",), "{:.1f}"),
    ("goodput req/s", ("goodput_rps",), "{:.2f}"),
] + [(f"{m.upper()} {q} ms", (f"{m}_ms", q), "{:.1f}")
     for m in ("ttft", "tpot", "itl", "e2el") for q in ("p50", "p90", "p99")]


def _get(summary: dict, path: tuple):
    value = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _cell(value, fmt: str | None, base=None) -> str:
    if fmt is None:
        return ", ".join(f"{k}={v}" for k, v in (value or {}).items()) or "0"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = fmt.format(value)
    if base not in (None, 0) and not (isinstance(base, float) and math.isnan(base)):
        text += f" ({value / base:.2f}x)"
    return text


def table(runs: list[tuple[str, dict]]) -> str:
    """A fixed-width table, one column per run; later columns carry ratios to the first."""
    header = ["metric"] + [name for name, _ in runs]
    lines = []
    for label, path, fmt in ROWS:
        base = _get(runs[0][1], path)
        cells = [_cell(_get(s, path), fmt, base if i else None) for i, (_, s) in enumerate(runs)]
        lines.append([label] + cells)
    widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header))]
    render = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths))  # noqa: E731
    return "\n".join([render(header), render(["-" * w for w in widths])] +
                     [render(r) for r in lines])


def _cdf(ax, values_ms: list[float], label: str) -> None:
    if not values_ms:
        return
    ordered = sorted(values_ms)
    ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _latency_samples(records: list[dict]) -> dict[str, list[float]]:
    ok = [r for r in records if not r["error"]]
    tpot = [(r["e2e"] - r["ttft"]) / (r["output_tokens"] - 1) for r in ok
            if r["output_tokens"] > 1 and r["ttft"] is not None and r["e2e"] is not None]
    return {"TTFT": [r["ttft"] * 1000 for r in ok if r["ttft"] is not None],
            "TPOT": [t * 1000 for t in tpot],
            "ITL": [g * 1000 for r in ok for g in r["itl"]],
            "E2E": [r["e2e"] * 1000 for r in ok if r["e2e"] is not None]}


def plot_compare(runs: list[tuple[str, dict]], path: str | Path) -> Path:
    """Latency CDFs (TTFT, TPOT, ITL, E2E) and output tokens/s over time, one line per run.
    Each run is a result dict as written by bench/serve.py (summary, records, timeline)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 5, figsize=(22, 4))
    for name, result in runs:
        samples = _latency_samples(result["records"])
        for ax, (metric, values) in zip(axes[:4], samples.items()):
            _cdf(ax, values, name)
            ax.set_title(f"{metric} CDF")
            ax.set_xlabel("ms")
        timeline = result.get("timeline") or []
        axes[4].plot([t for t, _, _ in timeline], [tok for _, _, tok in timeline], label=name)
    axes[4].set_title("output tokens/s over time")
    axes[4].set_xlabel("s")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
