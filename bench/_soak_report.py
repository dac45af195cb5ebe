"""The soak's verdict, table and plot, from its samples (see bench/soak.py).

    verdict = report(out_dir, samples, outcomes, restart, quiet, args, requests_counted)

The goals are judged on the two quiet samples (no traffic, after warm-up and at the end):
with nothing in flight, RSS, descriptors and tasks are what the gateway keeps. The medians
of the first and last tenth of the loaded samples are reported beside them.
"""
from __future__ import annotations

import statistics
from pathlib import Path

RSS_GROWTH_LIMIT = 0.05
# Quiet samples: one descriptor or task may belong to a timer or a probe caught mid-way.
FD_MARGIN = 2
TASK_MARGIN = 2


def _window(samples: list[dict], key: str, after_s: float, last: bool, size: int) -> float:
    steady = [s[key] for s in samples if s["t"] >= after_s]
    picked = steady[-size:] if last else steady[:size]
    return statistics.median(picked) if picked else float("nan")


def growth(samples: list[dict], warmup_s: float) -> dict:
    size = max(3, len([s for s in samples if s["t"] >= warmup_s]) // 10)
    out = {}
    for key in ("rss_mib", "fds", "tasks", "loop_lag_ms"):
        start = _window(samples, key, warmup_s, False, size)
        end = _window(samples, key, warmup_s, True, size)
        out[key] = {"after_warmup": start, "end": end, "change": end - start,
                    "max": max(s[key] for s in samples)}
    out["rss_mib"]["growth"] = out["rss_mib"]["change"] / out["rss_mib"]["after_warmup"]
    out["window_samples"] = size
    return out


def quiet_growth(quiet: dict) -> dict:
    start, end = quiet["after_warmup"], quiet["end"]
    return {"rss_growth": (end["rss_mib"] - start["rss_mib"]) / start["rss_mib"],
            "fds": end["fds"] - start["fds"], "tasks": end["tasks"] - start["tasks"],
            "after_warmup": start, "end": end}


def judge(quiet: dict, outcomes: dict, sent_vs_counted: float) -> dict:
    checks = {
        "rss_growth_under_5pct": quiet["rss_growth"] < RSS_GROWTH_LIMIT,
        "no_fd_growth": quiet["fds"] <= FD_MARGIN,
        "no_task_growth": quiet["tasks"] <= TASK_MARGIN,
        "no_uninjected_errors": not outcomes["errors"],
        # A plain request abandoned before the gateway read it never existed for it.
        "every_request_counted": 0 <= sent_vs_counted <= outcomes["dropped"],
    }
    return {"checks": checks, "goals_met": all(checks.values())}


def table(samples: list[dict], rows: int = 20) -> str:
    step = max(1, len(samples) // rows)
    picked = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    lines = ["| t (s) | RSS (MiB) | open fds | asyncio tasks | worst loop lag (ms) | sent | errors |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {s['t']:.0f} | {s['rss_mib']:.1f} | {s['fds']} | {s['tasks']:.0f} | "
              f"{s['loop_lag_ms']:.1f} | {s['sent']} | {s['errors']} |" for s in picked]
    return "\n".join(lines)


def plot(samples: list[dict], warmup_s: float, restart: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    series = [("rss_mib", "RSS (MiB)"), ("fds", "open file descriptors"),
              ("tasks", "asyncio tasks"), ("loop_lag_ms", "worst event-loop lag (ms)")]
    fig, axes = plt.subplots(len(series), 1, figsize=(10, 10), sharex=True)
    for ax, (key, label) in zip(axes, series):
        ax.plot(t, [s[key] for s in samples], lw=1.2)
        ax.set_ylabel(label)
        ax.axvspan(0, warmup_s, color="grey", alpha=0.15)
        if "killed_at" in restart:
            ax.axvline(restart["killed_at"], color="red", ls="--", lw=1)
        ax.grid(alpha=0.3)
    axes[0].set_title("gateway soak (grey: warm-up, red: backend killed and restarted)")
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(out: Path, samples: list[dict], outcomes: dict, restart: dict, quiet: dict, args,
           requests_counted: float) -> dict:
    change = growth(samples, args.warmup_s)
    still = quiet_growth(quiet)
    # Every request sent reached the gateway's books (a disconnected one as 499).
    sent_vs_counted = outcomes["sent"] - requests_counted
    verdict = judge(still, outcomes, sent_vs_counted)
    plot(samples, args.warmup_s, restart, out / "soak.png")
    rss, q0, q1 = change["rss_mib"], still["after_warmup"], still["end"]
    summary = [
        f"# Gateway soak: {args.rate:g} req/s for {args.duration:g} s",
        "",
        f"- requests: {outcomes['sent']} sent, {outcomes['ok']} ok, {outcomes['dropped']} "
        f"disconnected by the client on purpose, {outcomes['injected']} failed inside the "
        f"backend restart window, {len(outcomes['errors'])} other errors; "
        f"{requests_counted:.0f} counted by the gateway",
        f"- quiet (no traffic) after warm-up at t={q0['t']:.0f}s vs at the end t={q1['t']:.0f}s: "
        f"RSS {q0['rss_mib']:.1f} -> {q1['rss_mib']:.1f} MiB ({still['rss_growth']:+.2%}, goal "
        f"< {RSS_GROWTH_LIMIT:.0%}), open fds {q0['fds']} -> {q1['fds']}, asyncio tasks "
        f"{q0['tasks']:.0f} -> {q1['tasks']:.0f}",
        f"- under load (medians of the first and last tenth after warm-up): RSS "
        f"{rss['after_warmup']:.1f} -> {rss['end']:.1f} MiB ({rss['growth']:+.2%}), open fds "
        f"{change['fds']['after_warmup']:.0f} -> {change['fds']['end']:.0f}, tasks "
        f"{change['tasks']['after_warmup']:.0f} -> {change['tasks']['end']:.0f}; worst loop lag "
        f"{change['loop_lag_ms']['max']:.1f} ms, median of the samples "
        f"{statistics.median(s['loop_lag_ms'] for s in samples):.1f} ms",
        f"- backend killed at t={restart.get('killed_at', float('nan')):.1f}s, restarted at "
        f"t={restart.get('restarted_at', float('nan')):.1f}s, first success after it at "
        f"t={restart.get('recovered_at', float('nan')):.1f}s",
        f"- goals met: {verdict['goals_met']} "
        + ", ".join(f"{k}={v}" for k, v in verdict["checks"].items()),
        "", table(samples), "",
    ]
    if outcomes["errors"]:
        summary += ["Errors outside the injected ones (first 20):", ""]
        summary += [f"- {e}" for e in outcomes["errors"][:20]]
    (out / "soak.md").write_text("\n".join(summary) + "\n")
    return {"rate": args.rate, "duration_s": args.duration, "warmup_s": args.warmup_s,
            "outcomes": {**outcomes, "errors": outcomes["errors"][:100]},
            "restart": restart, "requests_counted": requests_counted, "growth": change,
            "quiet": still,
            **verdict, "samples": samples}
