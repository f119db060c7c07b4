"""What tune writes: the chosen config.pbtxt, a Markdown report, a CSV of every point, PNG plots.

The config is protobuf text format of the model's own config with the tuned fields changed
(``space.apply``); the report shows its diff against the original rendered the same way, so
the diff holds the tuned lines alone. Plots need matplotlib (the ``tune`` extra); without it
they are skipped with a message saying so.
"""

from __future__ import annotations

import csv
import difflib
import json
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from tritonlite.tune import space
from tritonlite.tune.runner import Result, Settings, Trial

PLOT_FRONTIER = "frontier.png"
PLOT_CANDIDATES = "candidates.png"


def pbtxt(cfg: Any) -> str:
    """A ``pb.ModelConfig`` as config.pbtxt text (what ``core.config.parse_pbtxt`` reads)."""
    return str(text_format.MessageToString(cfg))


def config_diff(base: Any, chosen: Any) -> str:
    return "".join(
        difflib.unified_diff(
            pbtxt(base).splitlines(keepends=True),
            pbtxt(chosen).splitlines(keepends=True),
            "config.pbtxt (original)",
            "config.pbtxt (tuned)",
        )
    )


def write_csv(path: Path, trials: list[Trial]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "trial",
                "stage",
                "kind",
                "candidate",
                "status",
                "concurrency",
                "throughput",
                "p50_us",
                "p90_us",
                "p99_us",
                "server_queue_us",
                "server_compute_us",
                "avg_batch",
                "cache_hits",
                "score",
            ]
        )
        for t in trials:
            if not t.samples:
                w.writerow(
                    [
                        t.index,
                        t.stage,
                        t.kind,
                        t.candidate.label(),
                        t.status,
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        t.score,
                    ]
                )
            for s in t.samples:
                w.writerow(
                    [
                        t.index,
                        t.stage,
                        t.kind,
                        t.candidate.label(),
                        t.status,
                        s.concurrency,
                        round(s.throughput, 1),
                        round(s.p50_us, 1),
                        round(s.p90_us, 1),
                        round(s.p99_us, 1),
                        round(s.queue_us, 1),
                        round(s.compute_us, 1),
                        round(s.avg_batch, 2),
                        s.server.cache_hits,
                        round(t.score, 1),
                    ]
                )


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _rows(trials: list[Trial], chosen: Trial) -> list[str]:
    out = [
        "| # | stage | candidate | conc. | infer/s | p50 ms | p99 ms | server queue µs "
        "| server compute µs | avg batch | score | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        mark = " **(chosen)**" if t is chosen else ""
        if not t.samples:
            out.append(
                f"| {t.index} | {t.stage} | {t.candidate.label()}{mark} | | | | | | | | "
                f"| {t.status} |"
            )
        for s in t.samples:
            out.append(
                f"| {t.index} | {t.stage} | {t.candidate.label()}{mark} | {s.concurrency} "
                f"| {s.throughput:,.0f} | {_ms(s.p50_us)} | {_ms(s.p99_us)} "
                f"| {s.queue_us:,.0f} | {s.compute_us:,.0f} | {s.avg_batch:.2f} "
                f"| {t.score:,.0f} | {t.status if s is t.samples[-1] else 'ok'} |"
            )
    return out


def _rejections(trials: list[Trial]) -> list[str]:
    """What each refusal at a lighter load gave up at the heavy point (empty: none)."""
    rejected = [t for t in trials if t.status.startswith("rejected")]
    if not rejected:
        return []
    out = ["### Rejected at a lighter load", ""]
    out += [
        f"- #{t.index} {t.candidate.label()}: {t.status.removeprefix('rejected: ')}"
        for t in rejected
    ]
    return [*out, ""]


def markdown(
    model: str,
    result: Result,
    settings: Settings,
    base: Any,
    chosen_cfg: Any,
    load: str,
    command: str,
    plots: list[str],
    plot_note: str,
) -> str:
    budget = settings.latency_budget_us
    c = result.chosen
    lo, hi = settings.concurrency
    stopped = "; stopped by the time limit" if result.stopped_early else ""
    lines = [
        f"# tritonlite tune: {model}",
        "",
        f"Command: `{command}`",
        "",
        f"- load: {load}; concurrency {lo}:{hi} (probes at {hi}, sweeps at "
        f"{', '.join(map(str, space.concurrency_points(lo, hi)))})",
        f"- latency budget (p99): {f'{budget / 1000:g} ms' if budget else 'none'}",
        f"- {len(result.trials)} trials in {result.elapsed_s:.0f} s (limit "
        f"{settings.max_minutes:g} min{stopped})",
        f"- probe window {settings.probe_s:g} s, sweep window {settings.sweep_s:g} s, "
        f"noise margin {settings.margin:.0%}",
        "",
        "## Choice",
        "",
        f"**{c.candidate.label()}**: {result.reason}.",
        "",
        "Scores: a point's throughput, scaled by budget / p99 when its p99 is over the budget. "
        "A probe runs at the highest concurrency (twice for a candidate about to win; the "
        "score is the mean); a final sweep runs every concurrency point in two rounds, the "
        "second in reverse order, and scores its best point. A candidate replaces the best so "
        "far only when it beats it by more than the noise margin, and only if it does not "
        "lose more than 10% of the original's throughput at a lighter load (unless within "
        f"the budget there), judged on the median of {settings.light_rounds} probe windows "
        "there, against the original's median of as many (a final sweep: the mean of its "
        "rounds).",
        "",
        *_rejections(result.trials),
        "### Config diff",
        "",
        "```diff",
        config_diff(base, chosen_cfg).rstrip("\n") or "(no change)",
        "```",
        "",
        "## Candidates",
        "",
        "Server queue and compute are per request, from the statistics extension's counters "
        "over each window (compute = input + infer + output).",
        "",
        *_rows(result.trials, c),
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{p}]({p})" for p in plots] or [plot_note]
    return "\n".join(lines) + "\n"


def plots(out: Path, result: Result, settings: Settings) -> tuple[list[str], str]:
    """Write the PNG plots; returns their names and, when none could be drawn, why."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], (
            "plots skipped: matplotlib is not installed "
            "(pip install 'tritonlite[tune]' or pip install matplotlib)"
        )
    budget = settings.latency_budget_us
    fig, ax = plt.subplots(figsize=(8, 5))
    probes = [(t, s) for t in result.trials if t.kind == "probe" for s in t.samples if s.ok]
    ax.scatter(
        [s.p99_us / 1000 for _, s in probes],
        [s.throughput for _, s in probes],
        s=14,
        color="0.6",
        label="probes",
    )
    for t in result.trials:
        if t.kind != "sweep" or not any(s.ok for s in t.samples):
            continue
        pts = [s for s in t.samples if s.ok]
        style = "-o" if t is result.chosen else "--o"
        ax.plot(
            [s.p99_us / 1000 for s in pts],
            [s.throughput for s in pts],
            style,
            label=t.candidate.label() + (" (chosen)" if t is result.chosen else ""),
        )
        for s in pts:
            ax.annotate(f"c{s.concurrency}", (s.p99_us / 1000, s.throughput), fontsize=7)
    if budget:
        ax.axvline(budget / 1000, color="red", linestyle=":", label="p99 budget")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title("throughput-latency frontier")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / PLOT_FRONTIER, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.3 * len(result.trials))))
    names = [f"#{t.index} {t.stage}: {t.candidate.label()}" for t in result.trials]
    ax.barh(
        names,
        [t.score for t in result.trials],
        color=["tab:green" if t is result.chosen else "tab:blue" for t in result.trials],
    )
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("score (infer/s within the budget)")
    ax.set_title("every candidate")
    fig.tight_layout()
    fig.savefig(out / PLOT_CANDIDATES, dpi=110)
    plt.close(fig)
    return [PLOT_FRONTIER, PLOT_CANDIDATES], ""


def summary(model: str, result: Result, settings: Settings) -> dict[str, Any]:
    """The outcome as plain data (``summary.json``): the choice and both final sweeps."""

    def points(t: Trial) -> list[dict[str, float]]:
        return [
            {
                "concurrency": s.concurrency,
                "throughput": round(s.throughput, 1),
                "p50_us": round(s.p50_us, 1),
                "p99_us": round(s.p99_us, 1),
                "avg_batch": round(s.avg_batch, 2),
            }
            for s in t.samples
            if s.ok
        ]

    base = next((t for t in result.trials if t.kind == "sweep"), result.baseline)
    return {
        "model": model,
        "chosen": result.chosen.candidate.label(),
        "reason": result.reason,
        "elapsed_s": round(result.elapsed_s, 1),
        "stopped_early": result.stopped_early,
        "trials": len(result.trials),
        "latency_budget_us": settings.latency_budget_us,
        "original": points(base),
        "tuned": points(result.chosen),
    }


def write_all(
    out: Path, model: str, result: Result, settings: Settings, base: Any, load: str, command: str
) -> tuple[Path, Path, str]:
    """Write everything into ``out``; returns (config path, report path, plot note)."""
    out.mkdir(parents=True, exist_ok=True)
    chosen_cfg = space.apply(base, result.chosen.candidate)
    cfg_path = out / "config.pbtxt"
    cfg_path.write_text(pbtxt(chosen_cfg))
    (out / "config.original.pbtxt").write_text(pbtxt(base))
    write_csv(out / "measurements.csv", result.trials)
    (out / "summary.json").write_text(json.dumps(summary(model, result, settings), indent=1))
    names, note = plots(out, result, settings)
    report = out / "report.md"
    report.write_text(
        markdown(model, result, settings, base, chosen_cfg, load, command, names, note)
    )
    return cfg_path, report, note
