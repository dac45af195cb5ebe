"""The soak's verdict, tables and plot, from its samples and books (see bench/soak.py).

    verdict = report(out_dir, samples, outcomes, faults, quiet, args, books)

The leak goals are judged on the two quiet samples (no traffic, after warm-up and at the
end): with nothing in flight, RSS, descriptors and tasks are what the processes keep. A
worker SIGKILLed in between is replaced by a new process, so the comparison is of role totals
(the sum over the up process, the worker supervisor and whichever workers are alive): the
replacement's own memory stands in for the one it replaced. A worker alive at both quiet
samples is also compared with itself. The medians of the first and last tenth of the loaded
samples are reported beside them.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

RSS_GROWTH_LIMIT = 0.05
# Quiet samples: one descriptor or task may belong to a timer or a probe caught mid-way.
FD_MARGIN = 2
TASK_MARGIN = 2
ROLE_LABELS = {"up": "up process", "supervisor": "worker supervisor",
               "worker": "gateway workers", "other": "other children"}
NAN = float("nan")


def _window(samples: list[dict], key: str, after_s: float, last: bool, size: int) -> float:
    steady = [s[key] for s in samples if s["t"] >= after_s]
    picked = steady[-size:] if last else steady[:size]
    return statistics.median(picked) if picked else NAN


def growth(samples: list[dict], warmup_s: float) -> dict:
    size = max(3, len([s for s in samples if s["t"] >= warmup_s]) // 10)
    out = {}
    for key in ("rss_mib", "fds", "tasks", "loop_lag_ms"):
        start = _window(samples, key, warmup_s, False, size)
        end = _window(samples, key, warmup_s, True, size)
        out[key] = {"after_warmup": start, "end": end, "change": end - start,
                    "max": max((s[key] for s in samples), default=NAN)}
    base = out["rss_mib"]["after_warmup"]
    out["rss_mib"]["growth"] = out["rss_mib"]["change"] / base if base else NAN
    out["window_samples"] = size
    return out


def _ratio(a: float, b: float) -> float:
    return (b - a) / a if a else NAN


def _by_pid(sample: dict) -> dict[str, dict]:
    return {pid: {"role": role, "rss_mib": figures["rss_by_pid"][pid],
                  "fds": figures["fds_by_pid"][pid]}
            for role, figures in sample["roles"].items() for pid in figures["rss_by_pid"]}


def quiet_growth(quiet: dict) -> dict:
    """Totals, per role, and per process alive at both quiet samples (`long_lived`)."""
    start, end = quiet["after_warmup"], quiet["end"]
    roles = {role: {"rss_mib": [start["roles"][role]["rss_mib"], end["roles"][role]["rss_mib"]],
                    "fds": [start["roles"][role]["fds"], end["roles"][role]["fds"]],
                    "pids": [start["roles"][role]["pids"], end["roles"][role]["pids"]]}
             for role in start["roles"] if role in end["roles"]}
    for figures in roles.values():
        figures["rss_growth"] = _ratio(*figures["rss_mib"])
    a, b = _by_pid(start), _by_pid(end)
    long_lived = {pid: {"role": a[pid]["role"], "rss_mib": [a[pid]["rss_mib"], b[pid]["rss_mib"]],
                        "fds": [a[pid]["fds"], b[pid]["fds"]],
                        "rss_growth": _ratio(a[pid]["rss_mib"], b[pid]["rss_mib"])}
                  for pid in a if pid in b}
    return {"rss_growth": _ratio(start["rss_mib"], end["rss_mib"]),
            "fds": end["fds"] - start["fds"],
            "fds_long_lived": sum(p["fds"][1] - p["fds"][0] for p in long_lived.values()),
            "tasks": end["tasks"] - start["tasks"], "roles": roles, "long_lived": long_lived,
            "new_pids": sorted(set(b) - set(a)), "gone_pids": sorted(set(a) - set(b)),
            "after_warmup": start, "end": end}


def judge(quiet: dict, outcomes: dict, sent_vs_counted: float, cut: int, books: dict) -> dict:
    checks = {
        "rss_growth_under_5pct": quiet["rss_growth"] < RSS_GROWTH_LIMIT,
        # Like for like: a replacement worker is forked by the supervisor and starts with a
        # few of its descriptors (pidfds, its loop's), which is no growth of anything.
        "no_fd_growth": quiet["fds_long_lived"] <= FD_MARGIN,
        "no_task_growth": quiet["tasks"] <= TASK_MARGIN,
        "no_uninjected_errors": not outcomes["errors"],
        # A plain request abandoned before the gateway read it never existed for it, and one
        # cut by the worker kill died with the process that would have counted it.
        "every_request_counted": 0 <= sent_vs_counted <= outcomes["dropped"] + cut,
        **books["checks"],
    }
    return {"checks": checks, "goals_met": all(checks.values())}


def _goal_rows(still: dict, outcomes: dict, sent_vs_counted: float, books: dict,
               checks: dict) -> list[str]:
    q0, q1 = still["after_warmup"], still["end"]
    measured = {
        "rss_growth_under_5pct": f"RSS of all processes {q0['rss_mib']:.1f} -> "
                                 f"{q1['rss_mib']:.1f} MiB ({still['rss_growth']:+.2%})",
        "no_fd_growth": f"open fds of the processes alive at both: "
                        f"{still['fds_long_lived']:+d} (all processes {q0['fds']} -> "
                        f"{q1['fds']}; margin {FD_MARGIN})",
        "no_task_growth": f"asyncio tasks {q0['tasks']:.0f} -> {q1['tasks']:.0f} "
                          f"(margin {TASK_MARGIN})",
        "no_uninjected_errors": f"{len(outcomes['errors'])} errors outside the fault windows",
        "every_request_counted": f"sent - counted = {sent_vs_counted:.0f} (allowed 0.."
                                 f"{outcomes['dropped'] + books['cut_by_worker_kill']}: "
                                 f"abandoned or cut by the worker kill)",
        "books_balance": f"requests {books['counter_requests']:.0f} / {books['log_rows']} / "
                         f"{books['usage_requests']}, spend {books['counter_spend_usd']:.6f} / "
                         f"{books['usage_spend_usd']:.6f} USD",
        "answered_requests_logged": f"{books['answered'] - books['answered_missing_from_log']}"
                                    f" of {books['answered']} answered ids in the request log",
    }
    lines = ["| goal | measured | verdict |", "|---|---|---|"]
    lines += [f"| {name} | {measured.get(name, '')} | {'met' if ok else 'NOT met'} |"
              for name, ok in checks.items()]
    return lines


def _books_rows(books: dict) -> list[str]:
    return ["| | gateway counters (before stop) | request log rows | usage sum(requests) |",
            "|---|---:|---:|---:|",
            f"| requests | {books['counter_requests']:.0f} | {books['log_rows']} | "
            f"{books['usage_requests']} |",
            f"| spend (USD) | {books['counter_spend_usd']:.6f} | {books['log_spend_usd']:.6f} | "
            f"{books['usage_spend_usd']:.6f} |"]


def _role_rows(still: dict) -> list[str]:
    lines = ["| role | RSS after warm-up (MiB) | RSS at the end (MiB) | growth | fds | pids |",
             "|---|---:|---:|---:|---|---|"]
    for role, f in still["roles"].items():
        lines.append(f"| {ROLE_LABELS.get(role, role)} | {f['rss_mib'][0]:.1f} | "
                     f"{f['rss_mib'][1]:.1f} | {f['rss_growth']:+.2%} | {f['fds'][0]} -> "
                     f"{f['fds'][1]} | {f['pids'][0]} -> {f['pids'][1]} |")
    for pid, f in still["long_lived"].items():
        if f["role"] == "worker":
            lines.append(f"| worker {pid} (alive at both) | {f['rss_mib'][0]:.1f} | "
                         f"{f['rss_mib'][1]:.1f} | {f['rss_growth']:+.2%} | {f['fds'][0]} -> "
                         f"{f['fds'][1]} | |")
    return lines


def table(samples: list[dict], rows: int = 20) -> str:
    step = max(1, len(samples) // rows)
    picked = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    lines = ["| t (s) | RSS total (MiB) | up | supervisor | workers | open fds | asyncio tasks "
             "| worst loop lag (ms) | sent | errors |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in picked:
        role = {r: s["roles"].get(r, {}).get("rss_mib", NAN) for r in ("up", "supervisor",
                                                                        "worker")}
        lines.append(f"| {s['t']:.0f} | {s['rss_mib']:.1f} | {role['up']:.1f} | "
                     f"{role['supervisor']:.1f} | {role['worker']:.1f} | {s['fds']} | "
                     f"{s['tasks']:.0f} | {s['loop_lag_ms']:.1f} | {s['sent']} | "
                     f"{s['errors']} |")
    return "\n".join(lines)


def plot(samples: list[dict], warmup_s: float, faults: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    roles = [r for r in ROLE_LABELS if any(r in s["roles"] for s in samples)]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    for role in roles:
        axes[0].plot(t, [s["roles"].get(role, {}).get("rss_mib", math.nan) for s in samples],
                     lw=1.2, label=ROLE_LABELS[role])
        axes[1].plot(t, [s["roles"].get(role, {}).get("fds", math.nan) for s in samples],
                     lw=1.2, label=ROLE_LABELS[role])
    for ax in axes[:2]:
        ax.plot(t, [s["rss_mib" if ax is axes[0] else "fds"] for s in samples], lw=1.2,
                color="black", label="total")
        ax.legend(fontsize=7, loc="upper left")
    axes[2].plot(t, [s["tasks"] for s in samples], lw=1.2)
    axes[3].plot(t, [s["loop_lag_ms"] for s in samples], lw=1.2)
    labels = ["RSS (MiB)", "open file descriptors", "asyncio tasks (workers)",
              "worst event-loop lag (ms)"]
    for ax, label in zip(axes, labels):
        ax.set_ylabel(label)
        ax.axvspan(0, warmup_s, color="grey", alpha=0.15)
        if "killed_at" in faults.get("engine", {}):
            ax.axvline(faults["engine"]["killed_at"], color="red", ls="--", lw=1)
        if "killed_at" in faults.get("worker", {}):
            ax.axvline(faults["worker"]["killed_at"], color="purple", ls="--", lw=1)
        ax.grid(alpha=0.3)
    axes[0].set_title("gateway soak (grey: warm-up, red: backend killed and restarted, "
                      "purple: a gateway worker killed)", fontsize=9)
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fault_lines(outcomes: dict, faults: dict, books: dict) -> list[str]:
    engine, worker = faults.get("engine", {}), faults.get("worker", {})
    lines = []
    if engine:
        lines.append(f"- backend killed at t={engine.get('killed_at', NAN):.1f}s, restarted "
                     f"at t={engine.get('restarted_at', NAN):.1f}s, first success after it at "
                     f"t={engine.get('recovered_at', NAN):.1f}s: {outcomes['injected_engine']} "
                     f"failures in its window")
    if worker:
        lines.append(f"- gateway worker {worker.get('pid')} SIGKILLed at "
                     f"t={worker.get('killed_at', NAN):.1f}s, worker "
                     f"{worker.get('replacement')} forked in its place at "
                     f"t={worker.get('replaced_at', NAN):.1f}s: {outcomes['injected_worker']} "
                     f"failures in its window, {books['cut_by_worker_kill']} of them cut "
                     f"before any answer ({books['cut_found_in_log']} of those in the request "
                     f"log: a request the killed worker had not finished is expected nowhere)")
    return lines


def report(out: Path, samples: list[dict], outcomes: dict, faults: dict, quiet: dict, args,
           books: dict) -> dict:
    change = growth(samples, args.warmup_s)
    still = quiet_growth(quiet)
    # Every request sent reached the gateway's books (a disconnected one as 499).
    sent_vs_counted = outcomes["sent"] - books["counter_requests"]
    verdict = judge(still, outcomes, sent_vs_counted, books["cut_by_worker_kill"], books)
    plot(samples, args.warmup_s, faults, out / "soak.png")
    rss, q0, q1 = change["rss_mib"], still["after_warmup"], still["end"]
    shape = "SQLite, no Redis" if args.sqlite else "PostgreSQL and Redis"
    summary = [
        f"# Gateway soak: {args.rate:g} req/s for {args.duration:g} s, `inferplane up "
        f"--workers {args.workers}` on {shape}",
        "",
        f"- goals met: {verdict['goals_met']}",
        f"- requests: {outcomes['sent']} sent, {outcomes['ok']} ok, "
        f"{outcomes['answered_error']} answered with an error, {outcomes['dropped']} "
        f"disconnected by the client on purpose, {outcomes['injected']} failed inside a fault "
        f"window, {len(outcomes['errors'])} other errors",
        *_fault_lines(outcomes, faults, books),
        f"- quiet (no traffic) after warm-up at t={q0['t']:.0f}s vs at the end t={q1['t']:.0f}s "
        f"(role totals: a replaced worker's successor counts in its place)",
        f"- under load (medians of the first and last tenth after warm-up): RSS "
        f"{rss['after_warmup']:.1f} -> {rss['end']:.1f} MiB ({rss['growth']:+.2%}), open fds "
        f"{change['fds']['after_warmup']:.0f} -> {change['fds']['end']:.0f}, tasks "
        f"{change['tasks']['after_warmup']:.0f} -> {change['tasks']['end']:.0f}; worst loop lag "
        f"{change['loop_lag_ms']['max']:.1f} ms, median of the samples "
        f"{statistics.median([s['loop_lag_ms'] for s in samples] or [NAN]):.1f} ms",
        "", "## Goals", "",
        *_goal_rows(still, outcomes, sent_vs_counted, books, verdict["checks"]),
        "", "## Books (soak model)", "", *_books_rows(books), "",
        "## Processes at the quiet samples", "", *_role_rows(still), "",
        "## Samples", "", table(samples), "",
    ]
    if outcomes["errors"]:
        summary += ["Errors outside the injected ones (first 20):", ""]
        summary += [f"- {e}" for e in outcomes["errors"][:20]]
    if books["missing_ids"]:
        summary += ["", "Answered requests missing from the request log (first 20):", ""]
        summary += [f"- {rid}" for rid in books["missing_ids"][:20]]
    (out / "soak.md").write_text("\n".join(summary) + "\n")
    return {"rate": args.rate, "duration_s": args.duration, "warmup_s": args.warmup_s,
            "workers": args.workers, "shape": shape,
            "outcomes": {**outcomes, "errors": outcomes["errors"][:100]},
            "faults": faults, "books": books, "growth": change, "quiet": still,
            **verdict, "samples": samples}
