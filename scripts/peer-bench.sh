#!/usr/bin/env bash
# fp8train against like-for-like PyTorch peers on one GPU, in one go: `fp8train bench` (bf16 and
# the fp8 recipes) and scripts/reference_bench.py (PyTorch bf16 + torch.compile, torchao float8 +
# torch.compile) for the same shape, each alone on the GPU when timed, then the table of
# scripts/peer_table.py (each fp8train row against its peer recipe's fastest measured mode).
#
#   scripts/peer-bench.sh --fp8train build-device/fp8train --model llama3-1b
#   scripts/peer-bench.sh --phase start ...   # compile the --early peers now, gated (e.g. during a build)
#   scripts/peer-bench.sh --phase finish ...  # time them, then the rest, fp8train, the table
#
# --peers / --early: comma lists of MODE[-RECIPE]:COMPILE_MODE, MODE = compile (PyTorch bf16) or
# float8 (torchao; RECIPE tensorwise (default) or rowwise), COMPILE_MODE one of torch.compile's
# (default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs). --early peers are started
# by --phase start and wait, compiled and warmed up, for a file before their timed steps; '/' splits
# them into groups started one after another (a group once the previous one waits), so that the
# warm-ups' memory peaks do not add up. --phase finish waits for them (at most until --deadline,
# seconds since the epoch: a peer not waiting by then is stopped and reported as not run), times
# them one at a time in the listed order, then runs the other --peers one after another, then
# fp8train. --peer-args: more reference_bench.py arguments for every peer. Outputs go to --out
# (peer-*.json/.log, bench-MODEL.json/.log, peers-MODEL.md). Before each timing the GPU must be
# idle (nvidia-smi's utilization at most 5% for 3 s running, waiting up to --idle-wait seconds,
# default 120): what is timed beside other work is named in the log and in gpu-busy.txt, which
# the table's output repeats.
set -uo pipefail
cd "$(dirname "$0")/.."
APP=""
MODEL=llama3-1b
OUTDIR=${OUT:-peer-results}
PHASE=all
STEPS=10
WARMUP=5
PROFILE=0
BATCH=""
RECIPES=delayed,current
PEERS="compile:default,compile:reduce-overhead,float8:default,float8:reduce-overhead"
EARLY=""
DEADLINE=0
PEER_ARGS=""
IDLE_WAIT=120
PY=${FP8T_PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --fp8train) APP="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --phase) PHASE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --profile) PROFILE="$2"; shift 2 ;;
    --micro-batch) BATCH="$2"; shift 2 ;;
    --recipes) RECIPES="$2"; shift 2 ;;
    --peers) PEERS="$2"; shift 2 ;;
    --early) EARLY="$2"; shift 2 ;;
    --deadline) DEADLINE="$2"; shift 2 ;;
    --peer-args) PEER_ARGS="$2"; shift 2 ;;
    --idle-wait) IDLE_WAIT="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | grep '^#'; exit 0 ;;
    *) echo "peer-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$PHASE" in start|finish|all) ;; *) echo "peer-bench.sh: --phase is start, finish or all" >&2; exit 2 ;; esac
mkdir -p "$OUTDIR"
log() { echo "[peer-bench $(date +%H:%M:%S)] $*"; }
contains() { [[ ",$1," == *",$2,"* ]]; }
name_of() { echo "$1" | tr ':' '_'; }

# A spec MODE[-RECIPE]:COMPILE_MODE into the caller's locals mode, recipe (torchao's; tensorwise
# unless named) and cmode.
parse_spec() {
  local kind=${1%%:*}
  cmode=${1#*:}
  mode=${kind%%-*}
  recipe=tensorwise
  [[ "$kind" == *-* ]] && recipe=${kind#*-}
  return 0
}

# Starts one peer in the background; gate: the file it waits for before timing ("" = none).
start_peer() {
  local spec=$1 gate=$2 mode recipe cmode n
  parse_spec "$spec"
  n=$(name_of "$spec")
  local args=(scripts/reference_bench.py --model "$MODEL" --mode "$mode" --compile-mode "$cmode"
              --float8-recipe "$recipe" --steps "$STEPS" --warmup "$WARMUP" --json "$OUTDIR/peer-$n.json")
  [ -n "$BATCH" ] && args+=(--micro-batch "$BATCH")
  [ -n "$gate" ] && args+=(--wait-for "$gate")
  # shellcheck disable=SC2206  # --peer-args: more reference_bench.py arguments, split on spaces
  [ -n "$PEER_ARGS" ] && args+=($PEER_ARGS)
  PYTHONUNBUFFERED=1 "$PY" "${args[@]}" >"$OUTDIR/peer-$n.log" 2>&1 &
  echo $! >"$OUTDIR/peer-$n.pid"
}

# A peer that gave no result (stopped at the deadline, or failed) leaves a record saying so, with
# how long it had been compiling: scripts/peer_table.py lists it as not run instead of dropping it.
# The fields are reference_bench.py's (float8_recipe null for PyTorch bf16; CUDA graphs in the
# modes its COMPILE_MODES replays).
not_run() {
  local spec=$1 reason=$2 mode recipe cmode n started secs=null graphs=false
  parse_spec "$spec"
  n=$(name_of "$spec")
  [ "$mode" = float8 ] && recipe="\"$recipe\"" || recipe=null
  [[ "$cmode" == reduce-overhead || "$cmode" == max-autotune ]] && graphs=true
  started=$(stat -c %Y "$OUTDIR/peer-$n.pid" 2>/dev/null) && secs=$(( $(date +%s) - started ))
  printf '{"mode": "%s", "float8_recipe": %s, "compile_mode": "%s", "cuda_graphs": %s, "not_run": "%s", "seconds_since_start": %s}\n' \
    "$mode" "$recipe" "$cmode" "$graphs" "$reason" "$secs" >"$OUTDIR/peer-$n.json"
}

wait_pid() { while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; }

# gpu_utilization, await_idle_gpu (uses log, OUTDIR, IDLE_WAIT)
source scripts/gpu-idle.sh
# Whether peer `n` waits at its gate (or has ended).
settled() { [ -e "$OUTDIR/go-$1.ready" ] || ! kill -0 "$(cat "$OUTDIR/peer-$1.pid" 2>/dev/null || echo 0)" 2>/dev/null; }
early_list() { echo "$EARLY" | tr '/' ','; }

if [ "$PHASE" != finish ]; then
  (
    IFS=/ read -ra groups <<<"$EARLY"
    for group in "${groups[@]}"; do
      IFS=, read -ra specs <<<"$group"
      for spec in "${specs[@]}"; do
        [ -n "$spec" ] || continue
        log "starting $spec (compiles now, times after its gate)"
        start_peer "$spec" "$OUTDIR/go-$(name_of "$spec")"
      done
      for spec in "${specs[@]}"; do
        [ -n "$spec" ] || continue
        until settled "$(name_of "$spec")"; do sleep 1; done
      done
    done
  ) &
  echo $! >"$OUTDIR/launcher.pid"
  [ "$PHASE" = start ] && exit 0
fi

rm -f "$OUTDIR/gpu-busy.txt"  # this run's notes only
# The gated peers: every one waiting (or stopped at the deadline), then timed one at a time alone
# on the GPU; then the others.
IFS=, read -ra early <<<"$(early_list)"
for spec in "${early[@]}"; do
  [ -n "$spec" ] || continue
  n=$(name_of "$spec")
  until [ -e "$OUTDIR/peer-$n.pid" ] && settled "$n"; do
    if [ "$DEADLINE" -gt 0 ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
      log "$spec not ready by the deadline: stopped, not run"
      kill "$(cat "$OUTDIR/launcher.pid" 2>/dev/null || echo 0)" 2>/dev/null
      [ -e "$OUTDIR/peer-$n.pid" ] && kill "$(cat "$OUTDIR/peer-$n.pid")" 2>/dev/null
      not_run "$spec" "still compiling at the deadline"
      break
    fi
    sleep 1
  done
done
for spec in "${early[@]}"; do
  [ -n "$spec" ] || continue
  n=$(name_of "$spec")
  if ! { [ -e "$OUTDIR/go-$n.ready" ] && kill -0 "$(cat "$OUTDIR/peer-$n.pid")" 2>/dev/null; }; then
    [ -s "$OUTDIR/peer-$n.json" ] || not_run "$spec" "ended before its timed steps (see peer-$n.log)"
    continue
  fi
  await_idle_gpu "$spec"
  log "timing $spec"
  touch "$OUTDIR/go-$n"
  wait_pid "$(cat "$OUTDIR/peer-$n.pid")"
  tail -1 "$OUTDIR/peer-$n.log"
  [ -s "$OUTDIR/peer-$n.json" ] || not_run "$spec" "failed (see peer-$n.log)"
done
IFS=, read -ra all <<<"$PEERS"
for spec in "${all[@]}"; do
  [ -n "$spec" ] || continue
  contains "$(early_list)" "$spec" && continue
  n=$(name_of "$spec")
  await_idle_gpu "$spec"
  log "running $spec"
  start_peer "$spec" ""
  wait_pid "$(cat "$OUTDIR/peer-$n.pid")"
  tail -1 "$OUTDIR/peer-$n.log"
  [ -s "$OUTDIR/peer-$n.json" ] || not_run "$spec" "failed (see peer-$n.log)"
done

rc=0
if [ -n "$APP" ]; then
  cmd=("$APP" bench --config "configs/$MODEL.yaml" --precisions bf16,fp8 --recipes "$RECIPES" --bench-steps "$STEPS"
       --bench-warmup "$WARMUP" --json "$OUTDIR/bench-$MODEL.json")
  [ "$PROFILE" -gt 0 ] && cmd+=(--profile "$PROFILE")
  [ -n "$BATCH" ] && cmd+=(--set "train.micro_batch_size=$BATCH")
  await_idle_gpu "fp8train bench"
  log "${cmd[*]}"
  "${cmd[@]}" >"$OUTDIR/bench-$MODEL.log" 2>&1 || rc=$?
  grep -A12 -E "^precision" "$OUTDIR/bench-$MODEL.log" | head -30
fi
if [ -f "$OUTDIR/bench-$MODEL.json" ]; then
  "$PY" scripts/peer_table.py --bench "$OUTDIR/bench-$MODEL.json" --peers "$OUTDIR"/peer-*.json --markdown \
    --json "$OUTDIR/peers-$MODEL.json" | tee "$OUTDIR/peers-$MODEL.md"
fi
[ -s "$OUTDIR/gpu-busy.txt" ] && { echo "not alone on the GPU when timed:"; sed 's/^/  /' "$OUTDIR/gpu-busy.txt"; }
exit $rc
