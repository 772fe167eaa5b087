#!/usr/bin/env python3
"""The table and the verdicts of scripts/convergence.sh (its --help defines them), and each
label's tokens to bf16's loss and effective speedup (docs/convergence.md defines them).

  convergence_table.py DIR TARGET_PERCENT [--bench FILE...] [--report-html FILE]

Reads DIR/plan.tsv (one line per run: run, label, seed, state, exit code, seconds; state
`trained`, `kept`, `existing`, `not-run` or `interrupted`) and each run's DIR/runs/<run>/summary.json
and metrics.jsonl (its evaluations); --bench: JSON files of `fp8train bench` (one per round) of the
same config, for each label's tokens/s. Writes DIR/convergence.md (the tables),
DIR/convergence.json and DIR/convergence.html (the page of --report-html, `fp8train report` of the
runs, with the tables inserted at its top; a page of the tables alone without it), prints the
tables, and exits 1 when a verdict is FAIL, else 0 (runs not run, interrupted or stopped are
listed, not failed); 2 for unreadable or inconsistent input (named; nothing written).
"""
import argparse
import html
import json
import math
import os
import re
import statistics
import sys

REFERENCE = "bf16"
NOISE_SIGMAS = 2.0  # a difference within 2 standard errors of zero is noise
METRICS = ("final_val_loss", "best_val_loss")  # the verdict reads the first; the second is reported


def read_plan(out):
    """The runs of DIR/plan.tsv, in order, as dicts."""
    rows = []
    with open(os.path.join(out, "plan.tsv")) as f:
        for line in f:
            run, label, seed, state, rc, seconds = line.rstrip("\n").split("\t")
            rows.append({"run": run, "label": label, "seed": int(seed), "state": state,
                         "exit_code": int(rc) if rc else None, "wall_s": float(seconds) if seconds else None})
    return rows


def run_result(out, row):
    """A run's status and losses: its summary.json, or why there is none."""
    res = dict(row)
    res.update({m: None for m in METRICS})
    if row["state"] == "not-run":
        res["status"] = "not run"
        return res
    path = os.path.join(out, "runs", row["run"], "summary.json")
    if not os.path.exists(path):
        rc = row["exit_code"]
        res["status"] = {"existing": "no run folder", "interrupted": "interrupted"}.get(
            row["state"], f"failed (exit {rc}, no summary.json)")
        return res
    with open(path) as f:
        s = json.load(f)
    res["status"] = s.get("status", "unknown")
    for key in METRICS + ("steps", "tokens", "tokens_per_s", "skipped_steps", "final_loss"):
        if key in s:
            res[key] = s[key]
    if res["status"] == "completed" and res["final_val_loss"] is None:
        res["status"] = "completed without a validation loss"
    return res


def usable(r):
    return r["status"] == "completed"


CUT_SHORT = ("not run", "no run folder", "interrupted", "stopped")  # the study is incomplete, not failed


def broken(r):
    """A run that ran and failed: diverged, failed, or no summary.json after a non-zero exit."""
    return r["status"] != "completed" and r["status"] not in CUT_SHORT


def describe(values):
    """n, mean and sample standard deviation (None below two values)."""
    n = len(values)
    return {"n": n, "mean": statistics.fmean(values) if n else None,
            "sd": statistics.stdev(values) if n > 1 else None, "values": values}


def difference(ref, cur):
    """mean(cur) - mean(ref) and its standard error from the pooled standard deviation."""
    if not ref["n"] or not cur["n"]:
        return None
    d = cur["mean"] - ref["mean"]
    dof = ref["n"] + cur["n"] - 2
    if dof < 1:
        return {"diff": d, "pooled_sd": None, "se": None, "relative": d / abs(ref["mean"])}
    var = ((ref["n"] - 1) * (ref["sd"] or 0.0) ** 2 + (cur["n"] - 1) * (cur["sd"] or 0.0) ** 2) / dof
    sp = math.sqrt(var)
    se = sp * math.sqrt(1.0 / ref["n"] + 1.0 / cur["n"])
    return {"diff": d, "pooled_sd": sp, "se": se, "relative": d / abs(ref["mean"])}


def verdict(label, runs, stats, ref_stats, target_pct):
    """(verdict, reason) of one label against the reference (final validation loss)."""
    bad = [r["run"] + " " + r["status"] for r in runs if broken(r)]
    if bad:
        return "FAIL", "; ".join(bad)
    if label == REFERENCE:
        return ("reference", "") if stats["n"] else ("not run", "")
    if not stats["n"]:
        return "not run", ""
    if not ref_stats["n"]:
        return "no reference", f"no completed {REFERENCE} run"
    d = difference(ref_stats, stats)
    limit = target_pct / 100.0 * abs(ref_stats["mean"])
    rel = f"{100 * d['relative']:+.2f}%"
    if d["diff"] <= limit:
        return "pass", f"within the target ({rel} <= {target_pct:g}%)"
    if d["se"] is None:
        return "FAIL", f"{rel}: beyond the target ({target_pct:g}%); no error bar (one run each)"
    noise = NOISE_SIGMAS * d["se"]
    if d["diff"] <= noise:
        return "pass", f"{rel} beyond the target ({target_pct:g}%) but within the noise (2 se = {noise:.4f})"
    return "FAIL", f"{rel}: beyond the target ({target_pct:g}%) and the noise (2 se = {noise:.4f})"


# Tokens to target and time to loss (docs/convergence.md, "Time to loss"). The target is bf16's
# mean final validation loss; bf16 needs, by that definition, the tokens of its final evaluation.


class BadInput(Exception):
    """Input that cannot be read or does not fit the study: named, exit 2, nothing written."""


def eval_curve(out, run):
    """A completed run's evaluations as [(tokens, val_loss)] by step: metrics.jsonl's val_loss rows
    (the last row of a step, if logged twice), at step × tokens per step (summary.json tokens / steps)."""
    folder = os.path.join(out, "runs", run)
    with open(os.path.join(folder, "summary.json")) as f:
        s = json.load(f)
    if not s.get("steps") or not s.get("tokens"):
        raise BadInput(f"{folder}/summary.json: no positive 'steps' and 'tokens' (tokens per step unknown)")
    per_step = s["tokens"] / s["steps"]
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.exists(path):
        raise BadInput(f"{path}: missing (a completed run's evaluations)")
    by_step = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"{path}:{n}: not JSON ({e})") from None
            if "val_loss" in row:
                if not isinstance(row.get("step"), int) or not isinstance(row["val_loss"], (int, float)):
                    raise BadInput(f"{path}:{n}: a val_loss row needs a whole 'step' and a numeric 'val_loss'")
                by_step[row["step"]] = row["val_loss"]
    if not by_step:
        raise BadInput(f"{path}: no val_loss row")
    return [(step * per_step, by_step[step]) for step in sorted(by_step)]


def first_crossing(curve, target):
    """The tokens at which the curve first reaches `target` (val loss <= target), interpolated
    linearly between the evaluation before and the first one at or below it; the first
    evaluation's tokens if that one is already there; None when no evaluation reaches it."""
    for i, (tokens, loss) in enumerate(curve):
        if loss <= target:
            if i == 0:
                return tokens
            t0, l0 = curve[i - 1]
            return t0 + (l0 - target) / (l0 - loss) * (tokens - t0)
    return None


def tokens_to_target(label, runs, curves, target):
    """Per seed the tokens to `target` (None: not reached), and over the seeds mean, sd, min and
    max when every seed reached it. bf16 (the reference): the tokens of its final evaluation."""
    seeds = {}
    for r in runs:
        curve = curves[r["run"]]
        seeds[r["seed"]] = curve[-1][0] if label == REFERENCE else first_crossing(curve, target)
    values = list(seeds.values())
    reached = [t for t in values if t is not None]
    res = {"per_seed": {str(s): t for s, t in seeds.items()}, "n": len(values), "reached": len(reached),
           "mean": None, "sd": None, "min": None, "max": None}
    if label == REFERENCE:
        res["status"] = "reference"
    elif not values:
        res["status"] = "not run"
    elif not reached:
        res["status"] = "not reached"
    elif len(reached) < len(values):
        res["status"] = "not reached by every seed"
    else:
        res["status"] = "reached"
    if values and len(reached) == len(values):
        res.update(mean=statistics.fmean(values), sd=statistics.stdev(values) if len(values) > 1 else None,
                   min=min(values), max=max(values))
    return res


BENCH_ROW_KEYS = ("precision", "tokens_per_s", "tokens_per_step", "min_step_ms", "max_step_ms")


def bench_label(row):
    """A bench row's label in the study: bf16, fp8 (the config's recipe), fp8-<recipe>, fp16, fp32."""
    return row["precision"] + (f"-{row['recipe']}" if row.get("recipe") else "")


def read_bench(paths, tokens_per_step):
    """Each label's tokens/s over the bench files (one file per round): the median over the rounds,
    the range min..max over the rounds; with one round the range of its timed steps
    (tokens per step / slowest step .. / fastest step). Every row must time the study's step."""
    rounds = {}
    for path in paths:
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise BadInput(f"--bench {path}: {e}") from None
        if not isinstance(d, dict) or not isinstance(d.get("results"), list):
            raise BadInput(f"--bench {path}: no 'results' list (not the JSON of fp8train bench)")
        seen = set()
        for i, row in enumerate(d["results"]):
            missing = [k for k in BENCH_ROW_KEYS if not isinstance(row, dict) or k not in row]
            if missing:
                raise BadInput(f"--bench {path}: results[{i}] lacks '{missing[0]}'")
            label = bench_label(row)
            if label in seen:
                raise BadInput(f"--bench {path}: two rows of {label} (one round per file)")
            seen.add(label)
            if tokens_per_step is not None and row["tokens_per_step"] != tokens_per_step:
                raise BadInput(f"--bench {path}: results[{i}] ({label}) tokens_per_step {row['tokens_per_step']}, "
                               f"the runs' {tokens_per_step:g}: not the step the study trained")
            numbers = [row[k] for k in BENCH_ROW_KEYS[1:]]
            if not all(isinstance(x, (int, float)) and x > 0 for x in numbers) or row["min_step_ms"] > row["max_step_ms"]:
                raise BadInput(f"--bench {path}: results[{i}] ({label}): tokens_per_step, tokens_per_s and the step "
                               "times must be positive numbers, min_step_ms <= max_step_ms")
            rounds.setdefault(label, []).append(row)
    bench = {}
    for label, rows in rounds.items():
        tps = [r["tokens_per_s"] for r in rows]
        if len(rows) == 1:
            lo, hi = (1e3 * rows[0]["tokens_per_step"] / rows[0][k] for k in ("max_step_ms", "min_step_ms"))
            spread = "timed steps"
        else:
            lo, hi = min(tps), max(tps)
            spread = "rounds"
        bench[label] = {"tokens_per_s": statistics.median(tps), "low": lo, "high": hi, "rounds": len(rows),
                        "range_over": spread, "values": tps}
    return bench


def effective_speedup(ref_tokens, ref_bench, tt, bench):
    """(bf16 tokens to target / bf16 tokens/s) / (label's mean tokens to target / label's tokens/s),
    with its range: the extremes over every seed's tokens to target and both ends of both bench
    ranges (lowest: the slowest seed, the label's lowest and bf16's highest tokens/s); None when a
    seed did not reach the target or a bench row is missing."""
    if tt["mean"] is None or ref_bench is None or bench is None or ref_tokens is None:
        return None
    value = (ref_tokens / ref_bench["tokens_per_s"]) / (tt["mean"] / bench["tokens_per_s"])
    low = (ref_tokens / ref_bench["high"]) / (tt["max"] / bench["low"])
    high = (ref_tokens / ref_bench["low"]) / (tt["min"] / bench["high"])
    return {"value": value, "low": low, "high": high, "tokens_ratio": ref_tokens / tt["mean"],
            "throughput_ratio": bench["tokens_per_s"] / ref_bench["tokens_per_s"]}


def mean_curve(curves):
    """The seeds' mean curve: at each evaluation's tokens that every seed's curve has, the mean
    of their val losses; None without a curve or a shared evaluation."""
    if not curves:
        return None
    shared = set.intersection(*({t for t, _ in c} for c in curves))
    if not shared:
        return None
    by_tokens = [dict(c) for c in curves]
    return [(t, statistics.fmean(c[t] for c in by_tokens)) for t in sorted(shared)]


def mean_curve_speedup(ref_tokens, ref_bench, tokens, bench):
    """The effective speedup of a mean curve's tokens to target; its range: the ends of both
    tokens/s ranges alone (one curve, no seed spread). None when not reached or not benched."""
    if tokens is None or ref_bench is None or bench is None or ref_tokens is None:
        return None
    def speedup(ref_tps, tps):
        return (ref_tokens / ref_tps) / (tokens / tps)
    return {"value": speedup(ref_bench["tokens_per_s"], bench["tokens_per_s"]),
            "low": speedup(ref_bench["high"], bench["low"]), "high": speedup(ref_bench["low"], bench["high"]),
            "tokens_ratio": ref_tokens / tokens}


def time_to_loss(out, runs, stats, bench_paths):
    """labels' tokens to target, bench tokens/s and effective speedup, and the target itself."""
    usable_runs = [r for r in runs if usable(r)]
    curves = {r["run"]: eval_curve(out, r["run"]) for r in usable_runs}
    per_step = {r["run"]: r["tokens"] / r["steps"] for r in usable_runs if r.get("tokens") and r.get("steps")}
    steps = sorted(set(per_step.values()))
    if len(steps) > 1:
        raise BadInput(f"the runs trained different tokens per step ({', '.join(f'{s:g}' for s in steps)}): "
                       "not one study")
    ref = stats.get(REFERENCE, {}).get("final_val_loss")
    target = ref["mean"] if ref and ref["n"] else None
    bench = read_bench(bench_paths, steps[0] if steps else None)
    labels = {}
    for label in stats:
        lab_runs = [r for r in usable_runs if r["label"] == label]
        tt = tokens_to_target(label, lab_runs, curves, target) if target is not None else None
        mc = mean_curve([curves[r["run"]] for r in lab_runs])
        labels[label] = {"tokens_to_target": tt, "bench": bench.get(label),
                         "mean_curve": {"final_val_loss": mc[-1][1] if mc else None,
                                        "tokens_to_target": (mc[-1][0] if label == REFERENCE else
                                                             first_crossing(mc, target)) if mc and target is not None
                                        else None, "effective_speedup": None}}
    ref_tt = labels.get(REFERENCE, {}).get("tokens_to_target")
    ends = sorted(set(ref_tt["per_seed"].values())) if ref_tt else []
    if len(ends) > 1:
        raise BadInput(f"the {REFERENCE} runs end at different token counts ({', '.join(f'{t:g}' for t in ends)}): "
                       "no single reference length")
    ref_tokens = ends[0] if ends else None
    for label, entry in labels.items():
        entry["time_to_target_s"] = None
        entry["effective_speedup"] = None
        tt, b = entry["tokens_to_target"], entry["bench"]
        if tt is None:
            continue
        if tt["mean"] is not None and b is not None:
            entry["time_to_target_s"] = tt["mean"] / b["tokens_per_s"]
        if label != REFERENCE:
            entry["effective_speedup"] = effective_speedup(ref_tokens, labels[REFERENCE]["bench"], tt, b)
            mc = entry["mean_curve"]
            mc["effective_speedup"] = mean_curve_speedup(ref_tokens, labels[REFERENCE]["bench"],
                                                         mc["tokens_to_target"], b)
    return {"target_val_loss": target, "reference_tokens": ref_tokens, "bench_files": list(bench_paths),
            "labels": labels}


def fmt_stat(s):
    if not s["n"]:
        return "-"
    return f"{s['mean']:.4f} ± {s['sd']:.4f}" if s["sd"] is not None else f"{s['mean']:.4f}"


def fmt_diff(d):
    if d is None:
        return "-"
    se = f" ± {d['se']:.4f}" if d["se"] is not None else ""
    return f"{d['diff']:+.4f}{se} ({100 * d['relative']:+.2f}%)"


def fmt_num(x, spec):
    return "-" if x is None else format(x, spec)


def fmt_tokens(t):
    """12,345 tokens below a million, 31.42M above."""
    return f"{t / 1e6:.2f}M" if t >= 1e6 else f"{t:,.0f}"


def fmt_tokens_to_target(tt):
    """(per seed, over the seeds) cells of a label's tokens to target."""
    if tt is None:
        return "-", f"- (no completed {REFERENCE} run: no target)"
    per_seed = ", ".join(f"s{s} " + (fmt_tokens(t) if t is not None else "not reached")
                         for s, t in tt["per_seed"].items()) or "-"
    if tt["status"] == "reference":
        return per_seed, (fmt_tokens(tt["mean"]) + " (the target's run length)") if tt["mean"] is not None else "-"
    if tt["status"] == "not reached by every seed":
        return per_seed, f"not reached by every seed ({tt['reached']} of {tt['n']})"
    if tt["status"] != "reached":
        return per_seed, tt["status"]
    sd = f" ± {fmt_tokens(tt['sd'])}" if tt["sd"] is not None else ""
    return per_seed, fmt_tokens(tt["mean"]) + sd


def fmt_bench(b):
    if b is None:
        return "- (not benched)"
    over = f"{b['rounds']} rounds" if b["range_over"] == "rounds" else "1 round: its timed steps"
    return f"{b['tokens_per_s']:,.0f} ({b['low']:,.0f}\u2013{b['high']:,.0f}; {over})"


def fmt_speedup(label, entry):
    if label == REFERENCE:
        return "reference"
    s = entry["effective_speedup"]
    if s is not None:
        return f"{s['value']:.2f}\u00d7 ({s['low']:.2f}\u2013{s['high']:.2f})"
    tt = entry["tokens_to_target"]
    if tt is not None and tt["status"] in ("not reached", "not reached by every seed"):
        return "- (not reached)"
    return "- (not benched)" if tt is not None and tt["mean"] is not None else "-"


def time_to_loss_table(ttl):
    """The markdown of tokens to target and the effective speedup, with their definitions."""
    target = ttl["target_val_loss"]
    head = (f"Tokens to {REFERENCE}'s final validation loss (the target: the mean of {REFERENCE}'s final val losses, "
            + (f"{target:.4f}, reached by {REFERENCE} at {fmt_tokens(ttl['reference_tokens'])} tokens" if target is not None
               else f"unknown: no completed {REFERENCE} run") + "), and the time to it:")
    lines = [head, "", "| run | tokens to target, per seed | tokens to target (mean ± sd) | bench tokens/s, median (range) "
             "| time to target s | effective speedup (range) |", "|---|---|---|---|---|---|"]
    for label, e in ttl["labels"].items():
        per_seed, over = fmt_tokens_to_target(e["tokens_to_target"])
        lines.append(f"| {label} | {per_seed} | {over} | {fmt_bench(e['bench'])} "
                     f"| {fmt_num(e['time_to_target_s'], '.1f')} | {fmt_speedup(label, e)} |")
    lines += ["", "Tokens to target: the first evaluation at or below the target, interpolated linearly in tokens from "
              f"the evaluation before it; {REFERENCE}'s is the tokens of its final evaluation. Over the seeds mean ± sd "
              "when every seed reached it. Effective speedup = "
              f"({REFERENCE} tokens to target ÷ {REFERENCE} tokens/s) ÷ (tokens to target ÷ tokens/s), tokens/s of "
              "`fp8train bench` (median over the rounds); its range: the extremes over each seed's tokens to target "
              "and the ends of both tokens/s ranges (the rounds', or one round's timed steps). A label not reached "
              "by every seed has no mean and no speedup."]
    lines += ["", "On the seeds' mean curve (at each evaluation the mean of the seeds' val losses): the tokens at which it "
              "reaches the target, the same interpolation, and the effective speedup it gives; defined when the "
              "mean curve reaches the target, also where a seed does not. Its range: the tokens/s ranges alone.", "",
              "| run | mean curve's final val loss | tokens to target | effective speedup (range) |", "|---|---|---|---|"]
    for label, e in ttl["labels"].items():
        lines.append(f"| {label} | {fmt_mean_curve(label, e['mean_curve'], e['bench'])} |")
    return lines


def fmt_mean_curve(label, mc, bench):
    """The cells after the label of a mean-curve row."""
    tokens = mc["tokens_to_target"]
    reach = "-" if mc["final_val_loss"] is None else (
        fmt_tokens(tokens) + (" (the target's run length)" if label == REFERENCE else "") if tokens is not None
        else "not reached")
    if label == REFERENCE:
        speed = "reference"
    elif mc["effective_speedup"] is not None:
        sp = mc["effective_speedup"]
        speed = f"{sp['value']:.2f}\u00d7 ({sp['low']:.2f}\u2013{sp['high']:.2f})"
    else:
        speed = "- (not reached)" if tokens is None else ("- (not benched)" if bench is None else "-")
    return f"{fmt_num(mc['final_val_loss'], '.4f')} | {reach} | {speed}"


def tables(res, target_pct, seeds):
    """The markdown: one row per label, the verdict's definition, tokens to target and the
    effective speedup, one row per run."""
    lines = [f"| run | seeds | final val loss (mean ± sd) | best val loss (mean ± sd) | Δ final vs {REFERENCE} (± se) "
             f"| Δ best vs {REFERENCE} (± se) | verdict |", "|---|---|---|---|---|---|---|"]
    for label, L in res["labels"].items():
        df = fmt_diff(L.get("final_val_loss_vs_reference")) if label != REFERENCE else "reference"
        db = fmt_diff(L.get("best_val_loss_vs_reference")) if label != REFERENCE else "reference"
        v = L["verdict"] + (": " + L["reason"] if L["reason"] else "")
        lines.append(f"| {label} | {L['final_val_loss']['n']}/{seeds} | {fmt_stat(L['final_val_loss'])} "
                     f"| {fmt_stat(L['best_val_loss'])} | {df} | {db} | {v} |")
    lines += ["", f"Verdict (final validation loss, each label against {REFERENCE}): Δ = difference of the means, "
              f"se = pooled sd × √(1/n + 1/n_{REFERENCE}); FAIL when Δ > {target_pct:g}% of {REFERENCE}'s mean "
              f"and Δ > {NOISE_SIGMAS:g} se (no se with one run each: Δ > target alone), or when a run "
              "ran without completing.", ""]
    lines += time_to_loss_table(res["time_to_loss"])
    lines += ["", "| run | seed | status | final val loss | best val loss | steps | tokens/s | wall s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['run']} | {r['seed']} | {r['status']} | {fmt_num(r['final_val_loss'], '.4f')} "
                     f"| {fmt_num(r['best_val_loss'], '.4f')} | {fmt_num(r.get('steps'), 'd')} "
                     f"| {fmt_num(r.get('tokens_per_s'), '.0f')} | {fmt_num(r['wall_s'], '.0f')} |")
    if res["not_run"]:
        lines += ["", "Not run or cut short: " + ", ".join(res["not_run"]) + " (the study is incomplete)."]
    return "\n".join(lines) + "\n"


def md_to_html(md):
    """The tables of `md` as HTML: each block of '|' lines a <table> (the second line its rule),
    every other non-empty line a paragraph; `code` spans kept as <code>."""
    def inline(text):
        return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))

    def cells(line):
        return [c.strip() for c in line.strip().strip("|").split("|")]

    out, block = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            head = "".join(f"<th>{inline(c)}</th>" for c in cells(block[0]))
            body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in cells(b)) + "</tr>" for b in block[2:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            block = []
        if line.strip():
            out.append(f"<p>{inline(line)}</p>")
    return "\n".join(out)


STUDY_STYLE = ("<style>.convergence-study{font-family:sans-serif;margin:1em}.convergence-study table{border-collapse:"
               "collapse;margin:0.5em 0}.convergence-study th,.convergence-study td{border:1px solid #ccc;"
               "padding:2px 6px;text-align:left}</style>")


def html_page(md, report_page):
    """The study's tables (from the markdown) at the top of the report's page, after its <body>
    tag; a page of the tables alone when there is no report page."""
    section = f'{STUDY_STYLE}\n<section class="convergence-study"><h2>Convergence study</h2>\n{md_to_html(md)}\n</section>'
    if report_page is None:
        return f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Convergence study</title></head>\n<body>\n{section}\n</body></html>\n"
    m = re.search(r"<body[^>]*>", report_page)
    if m is None:
        raise BadInput("--report-html: no <body> tag (not a page of fp8train report)")
    return report_page[:m.end()] + "\n" + section + report_page[m.end():]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="convergence_table.py", description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="DIR", help="the study folder (plan.tsv, runs/)")
    p.add_argument("target", metavar="TARGET_PERCENT", type=float, help="the verdict's target, percent of bf16's mean")
    p.add_argument("--bench", metavar="FILE", nargs="+", action="extend", default=[],
                   help="JSON of fp8train bench of the same config, one file per round (each label's tokens/s)")
    p.add_argument("--report-html", metavar="FILE", help="the page of fp8train report of the runs; the tables "
                   "are inserted at its top in DIR/convergence.html")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    out, target_pct = args.out, args.target
    report_page = None
    if args.report_html:
        try:
            with open(args.report_html) as f:
                report_page = f.read()
        except OSError as e:
            raise BadInput(f"--report-html: {e}") from None
    runs = [run_result(out, row) for row in read_plan(out)]
    labels = list(dict.fromkeys(r["label"] for r in runs))
    seeds = max((r["seed"] for r in runs), default=0)
    stats = {lab: {m: describe([r[m] for r in runs if r["label"] == lab and usable(r)]) for m in METRICS}
             for lab in labels}
    ref = stats.get(REFERENCE, {m: describe([]) for m in METRICS})
    res = {"reference": REFERENCE, "metric": METRICS[0], "target_percent": target_pct,
           "noise_sigmas": NOISE_SIGMAS, "seeds": seeds, "labels": {}, "runs": runs,
           "not_run": [r["run"] for r in runs if r["status"] in CUT_SHORT]}
    ttl = time_to_loss(out, runs, stats, args.bench)
    for lab in labels:
        lab_runs = [r for r in runs if r["label"] == lab]
        v, reason = verdict(lab, lab_runs, stats[lab]["final_val_loss"], ref["final_val_loss"], target_pct)
        entry = {"verdict": v, "reason": reason}
        for m in METRICS:
            entry[m] = stats[lab][m]
            if lab != REFERENCE:
                entry[f"{m}_vs_reference"] = difference(ref[m], stats[lab][m])
        entry.update(ttl["labels"][lab])
        res["labels"][lab] = entry
    res["time_to_loss"] = ttl
    res["complete"] = not res["not_run"]
    res["failed"] = [lab for lab, e in res["labels"].items() if e["verdict"] == "FAIL"]
    res["verdict"] = "FAIL" if res["failed"] else "pass"
    md = tables(res, target_pct, seeds)
    page = html_page(md, report_page)
    del res["time_to_loss"]["labels"]  # each label's entry holds its own
    with open(os.path.join(out, "convergence.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "convergence.json"), "w") as f:
        json.dump(res, f, indent=2)
    with open(os.path.join(out, "convergence.html"), "w") as f:
        f.write(page)
    print(md, end="")
    if res["failed"]:
        print("convergence.sh: verdict FAIL: " + "; ".join(
            f"{lab}: {res['labels'][lab]['reason']}" for lab in res["failed"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:  # named input problem: exit 2, nothing written
        print(f"convergence_table.py: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception:  # not a verdict: exit 3, never the 1 of a failed verdict
        import traceback
        traceback.print_exc()
        sys.exit(3)
