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
# by --phase start and wait (compiled and warmed up) for a file before their timed steps; the
# others run one after another in --phase finish. Outputs go to --out (peer-*.json/.log,
# bench-MODEL.json/.log, peers-MODEL.md).
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
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "peer-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$PHASE" in start|finish|all) ;; *) echo "peer-bench.sh: --phase is start, finish or all" >&2; exit 2 ;; esac
mkdir -p "$OUTDIR"
log() { echo "[peer-bench $(date +%H:%M:%S)] $*"; }
contains() { [[ ",$1," == *",$2,"* ]]; }
name_of() { echo "$1" | tr ':' '_'; }

# Starts one peer in the background; gate: the file it waits for before timing ("" = none).
start_peer() {
  local spec=$1 gate=$2 kind=${1%%:*} cmode=${1#*:} mode recipe=tensorwise n
  n=$(name_of "$spec")
  mode=${kind%%-*}
  [[ "$kind" == *-* ]] && recipe=${kind#*-}
  local args=(scripts/reference_bench.py --model "$MODEL" --mode "$mode" --compile-mode "$cmode"
              --float8-recipe "$recipe" --steps "$STEPS" --warmup "$WARMUP" --json "$OUTDIR/peer-$n.json")
  [ -n "$BATCH" ] && args+=(--micro-batch "$BATCH")
  [ -n "$gate" ] && args+=(--wait-for "$gate")
  PYTHONUNBUFFERED=1 "$PY" "${args[@]}" >"$OUTDIR/peer-$n.log" 2>&1 &
  echo $! >"$OUTDIR/peer-$n.pid"
}

wait_pid() { while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; }

if [ "$PHASE" != finish ]; then
  IFS=, read -ra early <<<"$EARLY"
  for spec in "${early[@]}"; do
    [ -n "$spec" ] || continue
    log "starting $spec (compiles now, times after its gate)"
    start_peer "$spec" "$OUTDIR/go-$(name_of "$spec")"
  done
  [ "$PHASE" = start ] && exit 0
fi

# Gated peers, one at a time alone on the GPU; then the others.
IFS=, read -ra early <<<"$EARLY"
for spec in "${early[@]}"; do
  [ -n "$spec" ] || continue
  n=$(name_of "$spec")
  log "timing $spec"
  touch "$OUTDIR/go-$n"
  wait_pid "$(cat "$OUTDIR/peer-$n.pid")"
  tail -1 "$OUTDIR/peer-$n.log"
done
IFS=, read -ra all <<<"$PEERS"
for spec in "${all[@]}"; do
  [ -n "$spec" ] || continue
  contains "$EARLY" "$spec" && continue
  n=$(name_of "$spec")
  log "running $spec"
  start_peer "$spec" ""
  wait_pid "$(cat "$OUTDIR/peer-$n.pid")"
  tail -1 "$OUTDIR/peer-$n.log"
done

rc=0
if [ -n "$APP" ]; then
  cmd=("$APP" bench --config "configs/$MODEL.yaml" --precisions bf16,fp8 --recipes "$RECIPES" --bench-steps "$STEPS"
       --bench-warmup "$WARMUP" --json "$OUTDIR/bench-$MODEL.json")
  [ "$PROFILE" -gt 0 ] && cmd+=(--profile "$PROFILE")
  [ -n "$BATCH" ] && cmd+=(--set "train.micro_batch_size=$BATCH")
  log "${cmd[*]}"
  "${cmd[@]}" >"$OUTDIR/bench-$MODEL.log" 2>&1 || rc=$?
  grep -A12 -E "^precision" "$OUTDIR/bench-$MODEL.log" | head -30
fi
if [ -f "$OUTDIR/bench-$MODEL.json" ]; then
  "$PY" scripts/peer_table.py --bench "$OUTDIR/bench-$MODEL.json" --peers "$OUTDIR"/peer-*.json --markdown \
    --json "$OUTDIR/peers-$MODEL.json" | tee "$OUTDIR/peers-$MODEL.md"
fi
exit $rc
