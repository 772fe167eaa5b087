"""The table of scripts/curve-bench.sh (run through `scripts/peer_table.py --curve DIR...`): per model,
fp8train's rows (bf16, fp8 delayed/current/block/rowwise: its own recipes; with and without GEMM
autotuning) and the PyTorch peers' (torch-bf16, torchao-tensorwise and torchao-rowwise: PyTorch
bf16 and torchao's float8 recipes), each over its repeats: tokens/s
median (range), model TFLOP/s (median), peak GiB, the FP8 speedup over the same system's bf16,
and fp8train / torchao (or / PyTorch for bf16).

Every ratio's range takes the extreme combinations (lowest numerator over highest denominator,
and the reverse), and the ratio is written to the first digit where the ends of that range
differ, so that no digit is printed that the repeats do not support: 1.14 (1.12-1.16), never
1.141 (one digit more where the rounded ends would read alike: 1.10 (1.08-1.12), not 1.1
(1.1-1.1)). A row with fewer repeats than the others says so ("2/3"); one that did not run says why.
"""
import glob
import json
import math
import os
import statistics

# The peers (scripts/curve-bench.sh --peers) and their rows: "torchao float8 rowwise" is torchao's
# recipe, "fp8train fp8:rowwise" fp8train's of the same name.
PEER_NAMES = {"torch-bf16": "PyTorch bf16", "torchao-tensorwise": "torchao float8 tensorwise",
              "torchao-rowwise": "torchao float8 rowwise"}
# The peers' names in folders written before they were named by framework (peer-rowwise.json, ...).
LEGACY_PEER = {"torch-bf16": "bf16", "torchao-tensorwise": "tensorwise", "torchao-rowwise": "rowwise"}
# fp8train row -> the peer run beside it (and the slot of its fp8train process)
FP8TRAIN_PEER = {"bf16": "torch-bf16", "fp8:delayed": "torchao-tensorwise", "fp8:current": "torchao-tensorwise",
                 "fp8:block": "torchao-rowwise", "fp8:rowwise": "torchao-rowwise"}
FP8TRAIN_ROWS = ["bf16", "fp8:delayed", "fp8:current", "fp8:block", "fp8:rowwise"]
SLOT_OF = FP8TRAIN_PEER


def digits_for(lo, hi, most=3):
    """Decimals up to the first digit where lo and hi differ (1.12 and 1.16: 2), one more where
    rounding would show both ends alike (1.078 and 1.12: 2, not 1.1-1.1); at least 1, at most `most`."""
    for d in range(1, most + 1):
        if math.floor(lo * 10**d) != math.floor(hi * 10**d):
            return d if f"{lo:.{d}f}" != f"{hi:.{d}f}" or d == most else d + 1
    return most


def median_range(values, spec=",.0f"):
    """'412,300 (410,100-415,800)', or the value alone for one repeat, '-' for none."""
    if not values:
        return "-"
    med = format(statistics.median(values), spec)
    if len(values) == 1:
        return med
    return f"{med} ({format(min(values), spec)}\u2013{format(max(values), spec)})"


def ratio_cell(num, den):
    """median(num)/median(den) with its range over the repeats, to the digits the range allows;
    '-' when a side has no repeats. One repeat on both sides: 3 decimals and 'one run each'."""
    if not num or not den:
        return "-", None
    med = statistics.median(num) / statistics.median(den)
    lo, hi = min(num) / max(den), max(num) / min(den)
    if len(num) == 1 and len(den) == 1:
        return f"{med:.3f}\u00d7 (one run each)", (med, lo, hi)
    d = digits_for(lo, hi)
    return f"{med:.{d}f}\u00d7 ({lo:.{d}f}\u2013{hi:.{d}f})", (med, lo, hi)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return {"not_run": f"unreadable result {os.path.basename(path)}: {e}"}


def fp8train_runs(model_dir, autotune):
    """{row label: {"tps": [...], "tflops": [...], "peak": [...], "tokens": set, "notes": [...]}}."""
    rows = {label: {"tps": [], "tflops": [], "peak": [], "tokens": set(), "notes": []} for label in FP8TRAIN_ROWS}
    for path in sorted(glob.glob(os.path.join(model_dir, f"fp8train-*-autotune-{autotune}-r*.json"))):
        d = load(path)
        if "not_run" in d:
            slot = d.get("slot", "")
            for label, s in SLOT_OF.items():
                if slot in (s, LEGACY_PEER[s], "all"):
                    rows[label]["notes"].append(f"round {d.get('round', '?')}: {d['not_run']}")
            continue
        for r in d.get("results", []):
            label = r["precision"] + (":" + r["recipe"] if r.get("recipe") else "")
            if label not in rows:
                continue
            row = rows[label]
            row["tps"].append(r["tokens_per_s"])
            row["tflops"].append(r["model_tflops"])
            row["peak"].append(r["peak_memory_bytes"] / 2**30)
            row["tokens"].add(r["tokens_per_step"])
            row["versions"] = d.get("versions")
    return rows


def peer_runs(model_dir):
    out = {}
    for p in PEER_NAMES:
        path = os.path.join(model_dir, f"peer-{p}.json")
        if not os.path.exists(path):
            path = os.path.join(model_dir, f"peer-{LEGACY_PEER[p]}.json")
        if not os.path.exists(path):
            continue
        d = load(path)
        row = {"tps": [], "tflops": [], "peak": [], "tokens": set(), "notes": [], "json": d}
        if "not_run" in d:
            row["notes"].append(d["not_run"])
        for q in d.get("rounds", []):
            row["tps"].append(q["tokens_per_s"])
            row["tflops"].append(q["model_tflops"])
        if d.get("rounds"):
            row["peak"].append(d.get("peak_memory_gib") or 0.0)
            row["tokens"].add(d["tokens_per_step"])
        out[p] = row
    return out


def peer_of(label, peers):
    """The peer an fp8train row is compared with: FP8TRAIN_PEER's, but for a mixture of experts (a
    rowwise peer that ran an arch moe model) every FP8 row's is torchao's MoE rowwise training, the only
    FP8 recipe of torchao's MoE training."""
    moe = [p for p, row in peers.items() if p.endswith("rowwise") and row["json"].get("arch") == "moe"]
    return moe[0] if moe and label.startswith("fp8") else FP8TRAIN_PEER[label]


def moe_note(d):
    """' MoE (forced-balanced routing)' for a peer that ran a mixture of experts, else ''."""
    moe = d.get("moe") if d.get("arch") == "moe" else None
    return f" MoE ({'forced-balanced' if moe['force_balance'] else 'learned'} routing)" if moe else ""


def repeats_cell(row, expected):
    n = len(row["tps"])
    return f"{n}/{expected}" if n < expected else str(n)


def table_row(model, name, row, expected, speedup, vs_peer):
    note = "; ".join(row["notes"])
    cells = [model, name + (f" ({note})" if note else ""), repeats_cell(row, expected), median_range(row["tps"]),
             median_range(row["tflops"], ".1f") if row["tflops"] else "-",
             f"{max(row['peak']):.2f}" if row["peak"] else "-", speedup, vs_peer]
    return "| " + " | ".join(cells) + " |"


def model_rows(model, model_dir, expected):
    """The markdown lines and the JSON records of one model's rows."""
    peers = peer_runs(model_dir)
    lines, records = [], []
    tokens = set()
    for p, row in peers.items():
        tokens |= row["tokens"]
    for autotune in ("on", "off"):
        runs = fp8train_runs(model_dir, autotune)
        if not any(r["tps"] or r["notes"] for r in runs.values()):
            continue
        for label in FP8TRAIN_ROWS:
            row = runs[label]
            if not row["tps"] and not row["notes"]:
                continue
            tokens |= row["tokens"]
            speedup, s_range = ratio_cell(row["tps"], runs["bf16"]["tps"]) if label != "bf16" else ("", None)
            key = peer_of(label, peers)
            peer = peers.get(key)
            vs, v_range = ratio_cell(row["tps"], peer["tps"]) if peer else ("-", None)
            if peer and vs != "-":
                vs += f" {PEER_NAMES[key]}" + moe_note(peer["json"])
            name = f"fp8train {label}" + ("" if autotune == "on" else " (GEMM autotune off)")
            lines.append(table_row(model, name, row, expected, speedup, vs))
            records.append({"model": model, "row": name, "tokens_per_s": row["tps"], "model_tflops": row["tflops"],
                            "peak_gib": max(row["peak"]) if row["peak"] else None, "notes": row["notes"],
                            "fp8_over_bf16": s_range, "over_peer": v_range, "versions": row.get("versions")})
    for p, row in peers.items():
        if 0 < len(row["tps"]) < expected and not row["notes"]:
            row["notes"].append(f"ended after {len(row['tps'])} rounds: see peer-{p}.log")
        speedup, s_range = ("", None)
        if p != "torch-bf16" and "torch-bf16" in peers:
            speedup, s_range = ratio_cell(row["tps"], peers["torch-bf16"]["tps"])
        lines.append(table_row(model, PEER_NAMES[p], row, expected, speedup, ""))
        records.append({"model": model, "row": PEER_NAMES[p], "tokens_per_s": row["tps"],
                        "model_tflops": row["tflops"], "peak_gib": max(row["peak"]) if row["peak"] else None,
                        "notes": row["notes"], "fp8_over_bf16": s_range,
                        "framework": row["json"].get("framework"), "versions": row["json"].get("versions")})
    if len(tokens) > 1:
        lines.append(f"| {model} | **tokens per step differ between the runs: {sorted(tokens)}** | | | | | | |")
    return lines, records


def expected_repeats(model_dir):
    rounds = [int(os.path.basename(p).rsplit("-r", 1)[1].split(".")[0])
              for p in glob.glob(os.path.join(model_dir, "fp8train-*-r*.json"))]
    return max(rounds) if rounds else 0


def environment_lines(dirs):
    out = []
    for d in dirs:
        env = load(os.path.join(d, "environment.json"))
        if "not_run" in env:
            continue
        out.append(f"{os.path.basename(os.path.normpath(d))}: {env.get('device')} ({env.get('nvidia_smi')}), torch "
                   f"{env.get('torch')}, CUDA {env.get('cuda')}, torchao {env.get('torchao')}, commit {env.get('commit')}"
                   + (f"; every model at {env['n_layer']} blocks (--n-layer)" if env.get("n_layer") else ""))
    return out


def main(dirs, json_path=""):
    print("| model | run | repeats | tokens/s median (range) | model TFLOP/s | peak GiB | FP8 / same system's bf16 "
          "| fp8train / peer |")
    print("|---|---|---|---|---|---|---|---|")
    records = []
    for d in dirs:
        for model_dir in sorted(p for p in glob.glob(os.path.join(d, "*")) if os.path.isdir(p)):
            model = os.path.basename(model_dir)
            lines, recs = model_rows(model, model_dir, max(expected_repeats(model_dir), 1))
            for line in lines:
                print(line)
            records += recs
    print()
    for line in environment_lines(dirs):
        print(line)
    for v in sorted({str(r["versions"]) for r in records if r.get("versions") and not r.get("framework")}):
        print(f"fp8train: {v}")
    frameworks = sorted({r["framework"] for r in records if r.get("framework")})
    for f in frameworks:
        print(f"peer: {f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(records, f, indent=2)
    return 0
