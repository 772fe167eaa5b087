#!/usr/bin/env python3
"""The table and the verdicts of scripts/convergence.sh (its --help defines them).

  convergence_table.py DIR TARGET_PERCENT

Reads DIR/plan.tsv (one line per run: run, label, seed, state, exit code, seconds; state
`trained`, `kept`, `existing`, `not-run` or `interrupted`) and each run's DIR/runs/<run>/summary.json. Writes
DIR/convergence.md (the tables) and DIR/convergence.json, prints the tables, and exits 1 when a
verdict is FAIL, else 0 (runs not run, interrupted or stopped are listed, not failed).
"""
import json
import math
import os
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
    for key in METRICS + ("steps", "tokens_per_s", "skipped_steps", "final_loss"):
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


def tables(res, target_pct, seeds):
    """The markdown: one row per label, the verdict's definition, one row per run."""
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
              "ran without completing.", "",
              "| run | seed | status | final val loss | best val loss | steps | tokens/s | wall s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        lines.append(f"| {r['run']} | {r['seed']} | {r['status']} | {fmt_num(r['final_val_loss'], '.4f')} "
                     f"| {fmt_num(r['best_val_loss'], '.4f')} | {fmt_num(r.get('steps'), 'd')} "
                     f"| {fmt_num(r.get('tokens_per_s'), '.0f')} | {fmt_num(r['wall_s'], '.0f')} |")
    if res["not_run"]:
        lines += ["", "Not run or cut short: " + ", ".join(res["not_run"]) + " (the study is incomplete)."]
    return "\n".join(lines) + "\n"


def main():
    out, target_pct = sys.argv[1], float(sys.argv[2])
    runs = [run_result(out, row) for row in read_plan(out)]
    labels = list(dict.fromkeys(r["label"] for r in runs))
    seeds = max((r["seed"] for r in runs), default=0)
    stats = {lab: {m: describe([r[m] for r in runs if r["label"] == lab and usable(r)]) for m in METRICS}
             for lab in labels}
    ref = stats.get(REFERENCE, {m: describe([]) for m in METRICS})
    res = {"reference": REFERENCE, "metric": METRICS[0], "target_percent": target_pct,
           "noise_sigmas": NOISE_SIGMAS, "seeds": seeds, "labels": {}, "runs": runs,
           "not_run": [r["run"] for r in runs if r["status"] in CUT_SHORT]}
    for lab in labels:
        lab_runs = [r for r in runs if r["label"] == lab]
        v, reason = verdict(lab, lab_runs, stats[lab]["final_val_loss"], ref["final_val_loss"], target_pct)
        entry = {"verdict": v, "reason": reason}
        for m in METRICS:
            entry[m] = stats[lab][m]
            if lab != REFERENCE:
                entry[f"{m}_vs_reference"] = difference(ref[m], stats[lab][m])
        res["labels"][lab] = entry
    res["complete"] = not res["not_run"]
    res["failed"] = [lab for lab, e in res["labels"].items() if e["verdict"] == "FAIL"]
    res["verdict"] = "FAIL" if res["failed"] else "pass"
    md = tables(res, target_pct, seeds)
    with open(os.path.join(out, "convergence.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "convergence.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(md, end="")
    if res["failed"]:
        print("convergence.sh: verdict FAIL: " + "; ".join(
            f"{lab}: {res['labels'][lab]['reason']}" for lab in res["failed"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # not a verdict: exit 3, never the 1 of a failed verdict
        import traceback
        traceback.print_exc()
        sys.exit(3)
