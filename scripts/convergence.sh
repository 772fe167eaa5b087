#!/usr/bin/env bash
# Does FP8 train as well as BF16? Trains one config in bf16 and in fp8 (once per FP8 recipe),
# K seeds each, on the same tokens, and compares the validation losses with error bars.
#
#   scripts/convergence.sh --config FILE [--set KEY=VALUE ...] [options] [-- extra fp8train flags]
#   scripts/convergence.sh TEXT_FILE [options]
#       (= --config configs/char-anna.yaml --set data.train_path=TEXT_FILE --steps 3000)
#
#   --config FILE        the experiment: any config and corpus (data.* keys, e.g. token shards of
#                        scripts/prepare_data.py: --set 'data.train_path=DIR/data_train_*.bin')
#   --set KEY=VALUE...   config overrides for every run (repeatable; one --set may take several)
#   --steps N            train.steps of every run (default: the config's)
#   --seeds K            runs per precision and recipe, run.seed 1..K (default 3)
#   --recipes LIST       train fp8 once per FP8 recipe, runs fp8-<recipe>: delayed,current,block
#                        (default: fp8 once, with the config's fp8.recipe)
#   --precisions LIST    bf16 (the reference, always trained) and any of fp8, fp16, fp32
#                        (default bf16,fp8)
#   --target PCT         the allowed excess of a mean final val loss over bf16's mean, in percent
#                        of bf16's mean (default 0.5)
#   --out DIR            the study folder (default convergence-results)
#   --fp8train PATH      the program (default: build/fp8train of this repository)
#   --jobs N             trainings at once (default 1), e.g. several small runs on one large GPU
#   --deadline EPOCH     seconds since 1970: a run is not started after it, nor when the longest
#                        run so far would not finish by it; such runs are reported as not run
#   --skip-done          keep a run whose DIR/runs/<run>/summary.json says completed, and a bench
#                        round whose JSON was written (continue a study cut short, with the same
#                        flags: nothing checks that they match)
#   --no-train           only compare the runs already in DIR/runs (e.g. with another --target)
#   --keep-checkpoints   keep each run's checkpoint files (deleted after the run by default: the
#                        study reads only summary.json and metrics.jsonl)
#   --knobs [--knob-steps 600]  also train short fp8 runs, each with one recipe knob changed
#                        (E4M3, history 1, margin 2, most_recent, each GEMM override): DIR/knobs.json
#   --bench-rounds N     before any training (so alone on the device), time every label with
#                        fp8train bench of the same config (the --set overrides but data.*, with
#                        data.order random: bench draws random tokens; the config's
#                        grad_accum_steps as --micro-batches), N rounds, one process each timing
#                        every label (bf16 first in odd rounds, last in even ones):
#                        DIR/bench/bench-r<R>.{json,log}, replaced unless --skip-done; the tokens/s
#                        of the effective speedup (default 0: none; the table reads every
#                        DIR/bench/bench-r*.json there is)
#   --bench-steps N, --bench-warmup N  timed and untimed steps of each bench row (default 20, 5)
#   --stats-seed S       the FP8 runs of seed S also record fp8.stats (--fp8-stats: per-slot amax,
#                        scale, saturation and underflow in metrics.jsonl; those runs then train
#                        without CUDA graphs: the same kernels, launched one by one); default: none
#
# Runs: DIR/runs/<label>-s<seed> (label bf16, fp8 or fp8-<recipe>, fp16, fp32) with its output in
# DIR/runs/<label>-s<seed>.log, trained seed by seed (every label of seed 1, then of seed 2, ...)
# so that a study cut short has whole seeds. Run s of every label has run.seed s, which seeds the
# initial weights and the data order (lib/data/dataset.h): all precisions and recipes of one seed
# start from the same weights and train on the same tokens in the same order.
#
# Verdict, per label against bf16, on the final validation loss of the runs that completed:
#   D = mean(label) - mean(bf16); se = sp * sqrt(1/n + 1/n_bf16), sp the pooled standard deviation
#   (sqrt of ((n-1) sd^2 + (n_bf16-1) sd_bf16^2) / (n + n_bf16 - 2)); T = PCT/100 * mean(bf16).
#   FAIL when D > T and D > 2 se: worse than bf16 beyond both the target and the noise. With one
#   run on each side there is no se: FAIL when D > T. A lower loss never fails. A run that ran
#   and failed (diverged, or exited without completing) fails its label (bf16's too); one not
#   started or interrupted is listed as cut short. A label without a completed run is "not run".
#   The best validation loss gets the same statistics, reported only.
#
# Time to loss (docs/convergence.md): per label the tokens to bf16's mean final validation loss,
# per seed (the first evaluation at or below it, interpolated linearly in tokens from the one
# before; "not reached" if none; bf16's own: its final evaluation's tokens), mean ± sd over the
# seeds when every seed reached it; and the effective speedup, (bf16 tokens to target / bf16
# tokens/s) / (tokens to target / tokens/s), tokens/s from the bench rounds (median), with its
# range: the extremes over each seed's tokens to target and the ends of both tokens/s ranges.
#
# Writes DIR/convergence.md (the tables: mean ± sd per label, D ± se, verdict, tokens to target
# and effective speedup; one row per run), DIR/convergence.json (the same, machine-readable),
# DIR/convergence.html (the tables above fp8train report of all runs: every seed's curves on
# shared axes, offline) and DIR/plan.tsv; also when runs were not run (deadline, interrupt).
# Every label's flags are checked with fp8train --dry-run first.
# Exit: 0 no verdict failed (runs cut short are listed), 1 a verdict failed, 2 bad usage (nothing
# trained; also bench flags that fp8train bench refuses, and study or bench files the table cannot
# use: named, the tables not written), 130 interrupted (SIGINT/SIGTERM: the runs or the bench in
# flight stop, the tables are written).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
bad() { echo "convergence.sh: $*" >&2; exit 2; }
APP=$REPO/build/fp8train
CONFIG=
OUTDIR=convergence-results
STEPS=
KNOB_STEPS=600
KNOBS=0
PRECISIONS=bf16,fp8
RECIPES=
JOBS=1
SEEDS=3
TARGET=0.5
TRAIN=1
SKIP_DONE=0
KEEP_CKPT=0
DEADLINE=
BENCH_ROUNDS=0
BENCH_STEPS=20
BENCH_WARMUP=5
STATS_SEED=
SETS=()
EXTRA=()
if [ $# -ge 1 ] && [ "${1:0:1}" != - ]; then  # TEXT_FILE: the character-level config on a book
  [ -f "$1" ] || bad "no text file '$1'"
  CONFIG=$REPO/configs/char-anna.yaml; SETS+=(--set "data.train_path=$1"); STEPS=3000; shift
fi
need() { [ $# -ge 2 ] || bad "$1 expects a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --config) need "$@"; CONFIG="$2"; shift 2 ;;
    --set) [[ "${2:-}" == *=* ]] || bad "--set expects KEY=VALUE, got '${2:-}'"; shift
           while [ $# -gt 0 ] && [ "${1:0:1}" != - ] && [[ "$1" == *=* ]]; do SETS+=(--set "$1"); shift; done ;;
    --steps) need "$@"; STEPS="$2"; shift 2 ;;
    --knob-steps) need "$@"; KNOB_STEPS="$2"; shift 2 ;;
    --knobs) KNOBS=1; shift ;;
    --bench-rounds) need "$@"; BENCH_ROUNDS="$2"; shift 2 ;;
    --bench-steps) need "$@"; BENCH_STEPS="$2"; shift 2 ;;
    --bench-warmup) need "$@"; BENCH_WARMUP="$2"; shift 2 ;;
    --stats-seed) need "$@"; STATS_SEED="$2"; shift 2 ;;
    --out) need "$@"; OUTDIR="$2"; shift 2 ;;
    --precisions) need "$@"; PRECISIONS="$2"; shift 2 ;;
    --recipes) need "$@"; RECIPES="$2"; shift 2 ;;
    --jobs) need "$@"; JOBS="$2"; shift 2 ;;
    --seeds) need "$@"; SEEDS="$2"; shift 2 ;;
    --target) need "$@"; TARGET="$2"; shift 2 ;;
    --deadline) need "$@"; DEADLINE="$2"; shift 2 ;;
    --skip-done) SKIP_DONE=1; shift ;;
    --no-train) TRAIN=0; shift ;;
    --keep-checkpoints) KEEP_CKPT=1; shift ;;
    --fp8train) need "$@"; APP="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) bad "unknown argument '$1' (--help lists the options)" ;;
  esac
done
[ -n "$CONFIG" ] || bad "name the experiment: --config FILE (or a text file first; --help)"
[ -f "$CONFIG" ] || bad "--config: no file '$CONFIG'"
[ -x "$APP" ] || bad "--fp8train: '$APP' is not an executable (build it, or pass --fp8train PATH)"
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || bad "$1 expects a positive integer, got '$2'"; }
positive --jobs "$JOBS"; positive --seeds "$SEEDS"; positive --knob-steps "$KNOB_STEPS"; positive --bench-steps "$BENCH_STEPS"
[[ "$BENCH_ROUNDS" =~ ^[0-9]+$ ]] || bad "--bench-rounds expects a whole number, got '$BENCH_ROUNDS'"
[[ "$BENCH_WARMUP" =~ ^[0-9]+$ ]] || bad "--bench-warmup expects a whole number, got '$BENCH_WARMUP'"
[ -z "$STEPS" ] || positive --steps "$STEPS"
[ -z "$STATS_SEED" ] || positive --stats-seed "$STATS_SEED"
[ -z "$STATS_SEED" ] || [ "$STATS_SEED" -le "$SEEDS" ] || bad "--stats-seed $STATS_SEED: the study has seeds 1..$SEEDS"
[ -z "$DEADLINE" ] || [[ "$DEADLINE" =~ ^[0-9]+$ ]] || bad "--deadline expects seconds since 1970 (date +%s), got '$DEADLINE'"
python3 -c "import sys, math; t = float(sys.argv[1]); sys.exit(not (math.isfinite(t) and t >= 0))" "$TARGET" 2>/dev/null \
  || bad "--target expects a non-negative number (percent of bf16's mean), got '$TARGET'"

# The labels (bf16 first, the reference) and each one's flags.
LABELS=(bf16)
declare -A FLAGS=([bf16]="--precision bf16")
add_fp8() {
  if [ -z "$RECIPES" ]; then LABELS+=(fp8); FLAGS[fp8]="--precision fp8"; return; fi
  local r recipes
  IFS=, read -r -a recipes <<< "$RECIPES"
  for r in "${recipes[@]}"; do
    case "$r" in
      delayed|current|block|rowwise) LABELS+=("fp8-$r"); FLAGS[fp8-$r]="--precision fp8 --fp8-recipe $r" ;;
      *) bad "unknown recipe '$r' in --recipes (delayed, current, block, rowwise)" ;;
    esac
  done
}
IFS=, read -r -a asked <<< "$PRECISIONS"
fp8_added=0
for p in "${asked[@]}"; do
  case "$p" in
    fp32|fp16) LABELS+=("$p"); FLAGS[$p]="--precision $p" ;;
    fp8) [ "$fp8_added" = 1 ] || add_fp8; fp8_added=1 ;;
    bf16) ;;
    *) bad "unknown precision '$p' in --precisions (fp32, bf16, fp16, fp8)" ;;
  esac
done
[ "$fp8_added" = 1 ] || [ -z "$RECIPES" ] || add_fp8

common=(--config "$CONFIG" "${SETS[@]}" --out-dir "$OUTDIR/runs" --quiet --overwrite
        --set train.checkpoint_interval=0)
[ -z "$STEPS" ] || common+=(--steps "$STEPS")
run_cmd() {  # run_cmd LABEL SEED: CMD=(fp8train with the flags of one run)
  # shellcheck disable=SC2206  # FLAGS holds words
  CMD=("$APP" "${common[@]}" --run-name "$1-s$2" ${FLAGS[$1]} --seed "$2" "${EXTRA[@]}")
  [[ "$1" != fp8* || "$2" != "$STATS_SEED" ]] || CMD+=(--fp8-stats)
}
# Bad flags or data are exit 2 before anything trains: every label's first run, --dry-run.
if [ "$TRAIN" = 1 ]; then
  for label in "${LABELS[@]}"; do
    run_cmd "$label" 1
    rc=0; out=$("${CMD[@]}" --dry-run 2>&1) || rc=$?
    [ "$rc" = 0 ] || { printf '%s\n' "$out" >&2; echo "convergence.sh: the $label runs' flags are refused (fp8train exit $rc, above); nothing trained" >&2; exit 2; }
  done
fi
mkdir -p "$OUTDIR/runs"

# The plan, seed by seed: RUNS in order, each one's label, seed, state (to-run, trained, kept,
# existing, not-run, interrupted), exit code and seconds.
RUNS=()
declare -A LABEL_OF SEED_OF STATE RC WALL
for ((seed = 1; seed <= SEEDS; seed++)); do
  for label in "${LABELS[@]}"; do
    run=$label-s$seed
    RUNS+=("$run"); LABEL_OF[$run]=$label; SEED_OF[$run]=$seed; STATE[$run]=to-run; RC[$run]=; WALL[$run]=
  done
done
completed() { python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1])).get('status') != 'completed')" \
                "$OUTDIR/runs/$1/summary.json" 2>/dev/null; }
for run in "${RUNS[@]}"; do
  if [ "$TRAIN" = 0 ]; then
    if [ -d "$OUTDIR/runs/$run" ]; then STATE[$run]=existing; else STATE[$run]=not-run; fi
  elif [ "$SKIP_DONE" = 1 ] && completed "$run"; then
    STATE[$run]=kept; echo "== $run: kept (completed earlier)"
  fi
done

# Training: up to JOBS fp8train processes in the background, reaped by polling. SIGINT/SIGTERM
# stop the runs in flight (fp8train saves a checkpoint and exits 130) and start no more.
declare -A PID=() START=()
STOP=0
LONGEST=0
BENCH_PID=
# shellcheck disable=SC2317  # invoked by the trap
on_signal() {
  STOP=1
  local run
  for run in "${!PID[@]}"; do kill -TERM "${PID[$run]}" 2>/dev/null || true; done
  [ -z "$BENCH_PID" ] || kill -TERM "$BENCH_PID" 2>/dev/null || true
}
trap on_signal INT TERM
result_line() {  # the status and losses of a finished run, one line
  python3 - "$OUTDIR/runs/$1/summary.json" <<'PY' 2>/dev/null || echo "no summary.json"
import json, sys
s = json.load(open(sys.argv[1]))
f = lambda k: "-" if s.get(k) is None else f"{s[k]:.4f}"
print(f"{s.get('status')}, final val loss {f('final_val_loss')}, best {f('best_val_loss')}")
PY
}
reap() {  # reap [block]: collect the finished runs (with block: wait until at least one finishes)
  local run rc found=0
  while :; do
    for run in "${!PID[@]}"; do
      kill -0 "${PID[$run]}" 2>/dev/null && continue
      rc=0; wait "${PID[$run]}" || rc=$?
      RC[$run]=$rc; WALL[$run]=$(( $(date +%s) - START[$run] )); STATE[$run]=trained
      [ "$STOP" = 0 ] || [ "$rc" = 0 ] || STATE[$run]=interrupted  # stopped by on_signal
      [ "${WALL[$run]}" -le "$LONGEST" ] || LONGEST=${WALL[$run]}
      unset "PID[$run]"; found=1
      [ "$KEEP_CKPT" = 1 ] || rm -f "$OUTDIR/runs/$run"/checkpoint*.pt
      echo "== $run: exit $rc after ${WALL[$run]} s: $(result_line "$run")"
      [ "$rc" = 0 ] || tail -n 5 "$OUTDIR/runs/$run.log" | sed 's/^/   /'
    done
    if [ "${1:-}" != block ] || [ "$found" = 1 ] || [ ${#PID[@]} = 0 ]; then return; fi
    sleep 0.2
  done
}
too_late() {  # too_late [LONGEST WHAT]: why a run (a WHAT) that would start now is not run; nothing when it may start
  [ -n "$DEADLINE" ] || return 0
  local now longest=${1:-$LONGEST} what=${2:-runs}; now=$(date +%s)
  if [ "$now" -ge "$DEADLINE" ]; then echo "past the deadline"
  elif [ $(( now + longest )) -gt "$DEADLINE" ]; then echo "would not finish by the deadline ($what took up to $longest s)"
  fi
}

# The bench rounds, before any training so that each is alone on the device: round r is one
# fp8train bench process timing every label (bf16 first in odd rounds, last in even ones) at the
# training step of the study (the config's grad_accum_steps as --micro-batches); data.* overrides
# are left out and data.order is random (bench draws random tokens, and refuses a sequential order
# of a config made for token files). A round whose flags are refused (exit 2) stops the study
# before it trains; another failure is a warning, the round missing from the table.
BENCH_DIR=$OUTDIR/bench
reversed() { local i; for ((i = $#; i >= 1; i--)); do printf '%s ' "${!i}"; done; }  # words, last first
bench_cmd() {  # bench_cmd ROUND: CMD=(fp8train bench of every label, in that round's order)
  local precisions=() recipes=() label i sets=() accum
  for label in "${LABELS[@]}"; do
    label=${label%%-*}
    [[ " ${precisions[*]} " == *" $label "* ]] || precisions+=("$label")
  done
  [ -z "$RECIPES" ] || IFS=, read -r -a recipes <<< "$RECIPES"
  if [ $(( $1 % 2 )) = 0 ]; then  # even rounds: the reverse order
    read -r -a precisions <<< "$(reversed "${precisions[@]}")"
    [ ${#recipes[@]} = 0 ] || read -r -a recipes <<< "$(reversed "${recipes[@]}")"
  fi
  for ((i = 0; i < ${#SETS[@]}; i += 2)); do [[ "${SETS[i + 1]}" == data.* ]] || sets+=("${SETS[@]:i:2}"); done
  accum=$("$APP" --config "$CONFIG" "${SETS[@]}" "${EXTRA[@]}" --print-config 2>/dev/null \
          | awk '$1 == "grad_accum_steps:" {print $2; exit}')
  [[ "$accum" =~ ^[1-9][0-9]*$ ]] || bad "bench: no train.grad_accum_steps in fp8train --print-config of the config"
  CMD=("$APP" bench --config "$CONFIG" "${sets[@]}" --set data.order=random --precisions "$(IFS=,; echo "${precisions[*]}")"
       --micro-batches "$accum" --bench-steps "$BENCH_STEPS" --bench-warmup "$BENCH_WARMUP"
       --json "$BENCH_DIR/bench-r$1.json" "${EXTRA[@]}")
  [ ${#recipes[@]} = 0 ] || CMD+=(--recipes "$(IFS=,; echo "${recipes[*]}")")
}
bench_done() { python3 -c "import json,sys; sys.exit(not isinstance(json.load(open(sys.argv[1])).get('results'), list))" \
                 "$BENCH_DIR/bench-r$1.json" 2>/dev/null; }
run_bench_rounds() {
  local r rc why t0 longest=0
  mkdir -p "$BENCH_DIR"
  [ "$SKIP_DONE" = 1 ] || rm -f "$BENCH_DIR"/bench-r*.json "$BENCH_DIR"/bench-r*.log
  for ((r = 1; r <= BENCH_ROUNDS; r++)); do
    [ "$STOP" = 0 ] || return 0
    if [ "$SKIP_DONE" = 1 ] && bench_done "$r"; then echo "== bench round $r: kept (done earlier)"; continue; fi
    why=$(too_late "$longest" "bench rounds")
    if [ -n "$why" ]; then echo "== bench round $r: not run: $why"; continue; fi
    bench_cmd "$r"
    echo "== bench round $r: ${CMD[*]} (log $BENCH_DIR/bench-r$r.log)"
    t0=$(date +%s)
    "${CMD[@]}" > "$BENCH_DIR/bench-r$r.log" 2>&1 &
    BENCH_PID=$!
    rc=0; wait "$BENCH_PID" || rc=$?
    while kill -0 "$BENCH_PID" 2>/dev/null; do rc=0; wait "$BENCH_PID" || rc=$?; done  # wait returns early on a signal
    BENCH_PID=
    [ $(( $(date +%s) - t0 )) -le "$longest" ] || longest=$(( $(date +%s) - t0 ))
    [ "$STOP" = 0 ] || { rm -f "$BENCH_DIR/bench-r$r.json"; return 0; }
    if [ "$rc" = 2 ]; then
      tail -n 5 "$BENCH_DIR/bench-r$r.log" >&2
      echo "convergence.sh: fp8train bench refused the flags (exit 2, above; $BENCH_DIR/bench-r$r.log); nothing trained" >&2
      exit 2
    fi
    if [ "$rc" != 0 ]; then
      echo "convergence.sh: warning: bench round $r failed (exit $rc, $BENCH_DIR/bench-r$r.log): not in the table" >&2
      tail -n 5 "$BENCH_DIR/bench-r$r.log" | sed 's/^/   /'
    fi
  done
}
[ "$TRAIN" = 0 ] || [ "$BENCH_ROUNDS" = 0 ] || run_bench_rounds
if [ "$TRAIN" = 1 ]; then
  for run in "${RUNS[@]}"; do
    [ "${STATE[$run]}" = to-run ] || continue
    while [ ${#PID[@]} -ge "$JOBS" ] && [ "$STOP" = 0 ]; do reap block; done
    [ "$STOP" = 0 ] || break
    why=$(too_late)
    if [ -n "$why" ]; then echo "== $run: not run: $why"; STATE[$run]=not-run; continue; fi
    echo "== $run: training (log $OUTDIR/runs/$run.log)"
    START[$run]=$(date +%s)
    run_cmd "${LABEL_OF[$run]}" "${SEED_OF[$run]}"
    "${CMD[@]}" > "$OUTDIR/runs/$run.log" 2>&1 &  # a simple command: $! is fp8train itself
    PID[$run]=$!
  done
  while [ ${#PID[@]} -gt 0 ]; do reap block; done
  for run in "${RUNS[@]}"; do [ "${STATE[$run]}" != to-run ] || STATE[$run]=not-run; done
fi
trap - INT TERM

for run in "${RUNS[@]}"; do
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "${LABEL_OF[$run]}" "${SEED_OF[$run]}" "${STATE[$run]}" "${RC[$run]}" "${WALL[$run]}"
done > "$OUTDIR/plan.tsv"
dirs=()
for run in "${RUNS[@]}"; do [ ! -d "$OUTDIR/runs/$run" ] || dirs+=("$OUTDIR/runs/$run"); done
page=()  # fp8train report of every run's curves on shared axes; the tables go on top of it
if [ ${#dirs[@]} -gt 0 ]; then
  if "$APP" report "${dirs[@]}" --html "$OUTDIR/report.html" > "$OUTDIR/report.txt" 2>&1; then
    page=(--report-html "$OUTDIR/report.html")
  else
    echo "convergence.sh: warning: fp8train report failed (see $OUTDIR/report.txt): convergence.html holds the tables alone" >&2
  fi
fi
bench_files=()
for f in "$BENCH_DIR"/bench-r*.json; do [ ! -f "$f" ] || bench_files+=("$f"); done
[ ${#bench_files[@]} = 0 ] || bench_files=(--bench "${bench_files[@]}")
verdict=0
python3 "$REPO/scripts/convergence_table.py" "$OUTDIR" "$TARGET" "${bench_files[@]}" "${page[@]}" || verdict=$?
rm -f "$OUTDIR/report.html"
[ "$verdict" != 2 ] || { echo "convergence.sh: convergence_table.py refused its input (above); the tables were not written" >&2; exit 2; }
[ "$verdict" -le 1 ] || { echo "convergence.sh: convergence_table.py failed (exit $verdict)" >&2; exit 1; }
wrote="$OUTDIR/convergence.md, $OUTDIR/convergence.json, $OUTDIR/convergence.html"
echo "wrote $wrote"
[ "$STOP" = 0 ] || { echo "convergence.sh: interrupted; the tables hold the runs that finished" >&2; exit 130; }

if [ "$KNOBS" = 1 ] && [ "$TRAIN" = 1 ]; then
  declare -A KNOB=(
    [hybrid]="" [e4m3]="--fp8-format E4M3" [history1]="--fp8-amax-history-len 1" [margin2]="--fp8-margin 2"
    [most_recent]="--fp8-amax-compute-algo most_recent"
    [override_fprop]="--fp8-override-linear-precision 1,0,0"
    [override_dgrad]="--fp8-override-linear-precision 0,1,0"
    [override_wgrad]="--fp8-override-linear-precision 0,0,1"
  )
  for name in hybrid e4m3 history1 margin2 most_recent override_fprop override_dgrad override_wgrad; do
    echo "== knob $name: $KNOB_STEPS steps"
    # shellcheck disable=SC2086
    "$APP" "${common[@]}" --steps "$KNOB_STEPS" --set train.eval_interval=0 --fp8-stats --precision fp8 \
      --run-name "knob-$name" ${KNOB[$name]} "${EXTRA[@]}"
    [ "$KEEP_CKPT" = 1 ] || rm -f "$OUTDIR/runs/knob-$name"/checkpoint*.pt
  done
  python3 - "$OUTDIR" <<'PY'
import json, sys
out = sys.argv[1]
names = ["hybrid", "e4m3", "history1", "margin2", "most_recent", "override_fprop", "override_dgrad", "override_wgrad"]
rows = {}
print(f"{'knob':16} {'val loss':>9} {'tokens/s':>10} {'grad_output scale (first mlp.c_fc)':>36}")
for n in names:
    d = f"{out}/runs/knob-{n}"
    s = json.load(open(f"{d}/summary.json"))
    last = [r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "fp8" in r][-1]
    g = next((x for x in last["fp8"] if x["slot"].endswith("mlp.c_fc:grad_output")), None)
    rows[n] = {"final_val_loss": s["final_val_loss"], "tokens_per_s": s["tokens_per_s"], "fp8_slots_last_log": last["fp8"]}
    gs = f"{g['format']} scale {g['scale']:.4g} amax {g['amax']:.3g}" if g else "-"
    print(f"{n:16} {s['final_val_loss']:9.4f} {s['tokens_per_s']:10.0f} {gs:>36}")
json.dump(rows, open(f"{out}/knobs.json", "w"), indent=2)
PY
fi
exit "$verdict"  # 1: a verdict failed (convergence.json "failed" names the labels)
