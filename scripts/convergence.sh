#!/usr/bin/env bash
# Convergence parity on a real text corpus: the character-level GPT of configs/char-anna.yaml
# (6 layers, d_model 384, seq 256) trained in bf16 and in fp8 (HYBRID, default recipe) on the
# same bytes, then the final validation losses compared: the script exits 1 when a precision's
# mean final validation loss is more than --target percent (default 1) above bf16's.
# --seeds K trains every precision with run.seed 1..K (runs anna-<label>-s<seed>) and compares
# the means, printing each one's spread (sample standard deviation, min and max) over the seeds:
# a difference smaller than that spread is noise, not a precision effect.
# --no-train compares the runs already in DIR (e.g. again with another --target).
# --precisions picks the runs (bf16 is always trained, as the reference), e.g. fp16,bf16,fp8.
# --recipes trains fp8 once per FP8 scaling recipe (fp8.recipe), e.g. delayed,current,block: runs
# anna-fp8-<recipe>, each compared with bf16, all curves in one report.
# --jobs N runs up to N of those trainings at once (each one's output in DIR/runs/<name>.log),
# e.g. bf16 and three recipes side by side on one large GPU.
# With --knobs it also trains short runs with each recipe knob changed, to show that each one
# takes effect: E4M3, history 1, margin 2, most_recent, and each GEMM override.
#
#   scripts/convergence.sh TEXT_FILE [--steps 3000] [--knob-steps 600] [--knobs] [--out DIR]
#                                    [--precisions bf16,fp8] [--recipes delayed,current,block]
#                                    [--seeds 1] [--target 1] [--no-train]
#                                    [--jobs 1] [--fp8train build/fp8train]
#                                    [-- extra fp8train flags]
# Writes DIR/runs/*, DIR/convergence.json, DIR/convergence.html (fp8train report) and DIR/knobs.json.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ "$1" != -h ] && [ "$1" != --help ] || { sed -n '2,25p' "$0"; exit 2; }
TEXT=$1; shift
APP=build/fp8train
OUTDIR=${OUT:-convergence-results}
STEPS=3000
KNOB_STEPS=600
KNOBS=0
PRECISIONS=bf16,fp8
RECIPES=
JOBS=1
SEEDS=1
TARGET=1
TRAIN=1
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --knob-steps) KNOB_STEPS="$2"; shift 2 ;;
    --knobs) KNOBS=1; shift ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --recipes) RECIPES="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --target) TARGET="$2"; shift 2 ;;
    --no-train) TRAIN=0; shift ;;
    --fp8train) APP="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "convergence.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -f "$TEXT" ] || { echo "convergence.sh: no text file '$TEXT'" >&2; exit 2; }
mkdir -p "$OUTDIR"
common=(--config configs/char-anna.yaml --set "data.train_path=$TEXT" --out-dir "$OUTDIR/runs" --quiet
        --overwrite --steps "$STEPS" --set train.checkpoint_interval=0)
# bf16 is the reference: always trained, first. A run is named by its label: the precision, or
# fp8-<recipe> under --recipes (fp8 is then trained once per recipe, and added when not asked for).
PRECS=(bf16)
declare -A FLAGS=([bf16]="--precision bf16")
add_fp8() {
  if [ -z "$RECIPES" ]; then PRECS+=(fp8); FLAGS[fp8]="--precision fp8"; return; fi
  IFS=, read -r -a recipes <<< "$RECIPES"
  for r in "${recipes[@]}"; do
    case "$r" in
      delayed|current|block) PRECS+=("fp8-$r"); FLAGS[fp8-$r]="--precision fp8 --fp8-recipe $r" ;;
      *) echo "convergence.sh: unknown recipe '$r' in --recipes (delayed, current, block)" >&2; exit 2 ;;
    esac
  done
}
IFS=, read -r -a asked <<< "$PRECISIONS"
fp8_added=0
for p in "${asked[@]}"; do
  case "$p" in
    fp32|fp16) PRECS+=("$p"); FLAGS[$p]="--precision $p" ;;
    fp8) [ "$fp8_added" = 1 ] || add_fp8; fp8_added=1 ;;
    bf16) ;;
    *) echo "convergence.sh: unknown precision '$p' in --precisions (fp32, bf16, fp16, fp8)" >&2; exit 2 ;;
  esac
done
[ "$fp8_added" = 1 ] || [ -z "$RECIPES" ] || add_fp8
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "convergence.sh: --jobs expects a positive integer, got '$JOBS'" >&2; exit 2; }
[[ "$SEEDS" =~ ^[1-9][0-9]*$ ]] || { echo "convergence.sh: --seeds expects a positive integer, got '$SEEDS'" >&2; exit 2; }
python3 -c "import sys; float(sys.argv[1])" "$TARGET" 2>/dev/null || {
  echo "convergence.sh: --target expects a number (percent), got '$TARGET'" >&2; exit 2; }
# One run per label and seed: anna-<label> with one seed, anna-<label>-s<seed> with several.
LABELS=("${PRECS[@]}")
PRECS=()
declare -A SEED_OF
for label in "${LABELS[@]}"; do
  for ((seed = 1; seed <= SEEDS; seed++)); do
    run=$label; [ "$SEEDS" = 1 ] || run=$label-s$seed
    PRECS+=("$run"); FLAGS[$run]="${FLAGS[$label]} --seed $seed"; SEED_OF[$run]=$seed
  done
done
train_one() {
  # shellcheck disable=SC2086
  "$APP" "${common[@]}" --run-name "anna-$1" ${FLAGS[$1]} "${EXTRA[@]}"
}
if [ "$TRAIN" = 0 ]; then
  echo "== --no-train: comparing the runs in $OUTDIR/runs"
elif [ "$JOBS" = 1 ]; then
  for prec in "${PRECS[@]}"; do
    echo "== $prec: $STEPS steps"
    train_one "$prec"
  done
else
  # Up to JOBS trainings at once; each writes its exit status next to its log, checked at the end.
  mkdir -p "$OUTDIR/runs"
  for prec in "${PRECS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    echo "== $prec: $STEPS steps (in the background, log $OUTDIR/runs/anna-$prec.log)"
    rm -f "$OUTDIR/runs/anna-$prec.status"
    ( set +e; train_one "$prec" > "$OUTDIR/runs/anna-$prec.log" 2>&1; echo $? > "$OUTDIR/runs/anna-$prec.status" ) &
  done
  wait
  failed=()
  for prec in "${PRECS[@]}"; do
    [ "$(cat "$OUTDIR/runs/anna-$prec.status" 2>/dev/null)" = 0 ] || failed+=("anna-$prec")
  done
  [ ${#failed[@]} = 0 ] || { echo "convergence.sh: failed: ${failed[*]} (see $OUTDIR/runs/<name>.log)" >&2; exit 1; }
fi
verdict=0
python3 - "$OUTDIR" "$SEEDS" "$TARGET" "${LABELS[@]}" <<'PY' || verdict=$?
import json, statistics, sys
out, seeds, target, labels = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
def runs(label):
    return [label] if seeds == 1 else [f"{label}-s{s}" for s in range(1, seeds + 1)]
keys = ("final_val_loss", "best_val_loss", "final_loss", "tokens_per_s", "steps")
res, missed = {}, []
for label in labels:
    per_seed = []
    for run in runs(label):
        s = json.load(open(f"{out}/runs/anna-{run}/summary.json"))
        if s.get("status") != "completed" or s.get("final_val_loss") is None:
            missed.append(f"anna-{run}: status {s.get('status')}, no final validation loss")
            continue
        row = {k: s[k] for k in keys}
        if "skipped_steps" in s:  # fp16: the steps skipped by the dynamic loss scaler
            row["skipped_steps"] = s["skipped_steps"]
        per_seed.append(row)
    vals = [r["final_val_loss"] for r in per_seed]
    res[label] = {"runs": per_seed, "seeds": len(vals)}
    if not vals:
        continue
    mean = statistics.fmean(vals)
    std = statistics.stdev(vals) if len(vals) > 1 else 0.0
    res[label].update({"final_val_loss_mean": mean, "final_val_loss_std": std,
                       "final_val_loss_min": min(vals), "final_val_loss_max": max(vals),
                       "tokens_per_s_mean": statistics.fmean(r["tokens_per_s"] for r in per_seed)})
    skipped = sum(r.get("skipped_steps", 0) for r in per_seed)
    print(f"{label}: final val loss mean {mean:.4f} over {len(vals)} seed(s), std {std:.4f}, "
          f"range {min(vals):.4f}..{max(vals):.4f}, {res[label]['tokens_per_s_mean']:.0f} tokens/s"
          + (f", {skipped} skipped steps" if skipped else ""))
ref = res.get("bf16", {}).get("final_val_loss_mean")
for label in labels[1:]:
    mean = res[label].get("final_val_loss_mean")
    if ref is None or mean is None:
        continue
    rel = (mean - ref) / ref
    res[f"{label}_vs_bf16_val_relative"] = rel
    ok = 100 * rel <= target
    print(f"{label} vs bf16 mean final val loss: {100 * rel:+.2f}% (target: at most {target:+g}%): "
          + ("met" if ok else "MISSED"))
    if not ok:
        missed.append(f"{label}: {100 * rel:+.2f}% above bf16 (target {target:g}%)")
res["target_percent"] = target
res["missed"] = missed
json.dump(res, open(f"{out}/convergence.json", "w"), indent=2)
if missed:
    print("convergence.sh: target missed: " + "; ".join(missed), file=sys.stderr)
    sys.exit(1)
PY
runs=()
for prec in "${PRECS[@]}"; do runs+=("$OUTDIR/runs/anna-$prec"); done
"$APP" report "${runs[@]}" --html "$OUTDIR/convergence.html"  # table + all curves on shared axes

if [ "$KNOBS" = 1 ]; then
  knob_common=("${common[@]}" --steps "$KNOB_STEPS" --set train.eval_interval=0 --fp8-stats --precision fp8)
  declare -A KNOB=(
    [hybrid]=""
    [e4m3]="--fp8-format E4M3"
    [history1]="--fp8-amax-history-len 1"
    [margin2]="--fp8-margin 2"
    [most_recent]="--fp8-amax-compute-algo most_recent"
    [override_fprop]="--fp8-override-linear-precision 1,0,0"
    [override_dgrad]="--fp8-override-linear-precision 0,1,0"
    [override_wgrad]="--fp8-override-linear-precision 0,0,1"
  )
  for name in hybrid e4m3 history1 margin2 most_recent override_fprop override_dgrad override_wgrad; do
    echo "== knob $name: $KNOB_STEPS steps"
    # shellcheck disable=SC2086
    "$APP" "${knob_common[@]}" --run-name "knob-$name" ${KNOB[$name]} "${EXTRA[@]}"
  done
  python3 - "$OUTDIR" <<'PY'
import json, sys
out = sys.argv[1]
names = ["hybrid", "e4m3", "history1", "margin2", "most_recent", "override_fprop", "override_dgrad", "override_wgrad"]
rows = {}
print(f"{'knob':16} {'val loss':>9} {'tokens/s':>10} {'grad_output scale (h0.mlp.c_fc)':>34}")
for n in names:
    d = f"{out}/runs/knob-{n}"
    s = json.load(open(f"{d}/summary.json"))
    last = [r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "fp8" in r][-1]
    slots = {x["slot"]: x for x in last["fp8"]}
    g = next((v for k, v in slots.items() if k.endswith("mlp.c_fc:grad_output")), None)
    rows[n] = {"final_val_loss": s["final_val_loss"], "tokens_per_s": s["tokens_per_s"],
               "fp8_slots_last_log": last["fp8"]}
    gs = f"{g['format']} scale {g['scale']:.4g} amax {g['amax']:.3g}" if g else "-"
    print(f"{n:16} {s['final_val_loss']:9.4f} {s['tokens_per_s']:10.0f} {gs:>34}")
json.dump(rows, open(f"{out}/knobs.json", "w"), indent=2)
PY
fi
exit "$verdict"  # 1: a precision missed its target (convergence.json "missed" says which)
