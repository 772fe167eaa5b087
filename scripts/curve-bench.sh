#!/usr/bin/env bash
# fp8train against its PyTorch peers over a list of model sizes, in one device command: for each
# model the rows fp8train bf16 / fp8 delayed / current / block (`fp8train bench`; --recipes adds
# fp8train's rowwise) and the peers torch-bf16 (PyTorch bf16), torchao-tensorwise and
# torchao-rowwise (torchao float8; scripts/reference_bench.py, each + torch.compile, chunked
# head + loss, compiled clip + AdamW), at the same micro-batch, sequence and tokens (read from
# configs/MODEL.yaml), --repeats interleaved rounds each, every timing alone on the GPU (the
# idle-GPU wait of scripts/gpu-idle.sh), then one markdown table (scripts/peer_table.py --curve):
# tokens/s median (range), model TFLOP/s, peak GiB, FP8 speedup over the same system's bf16 and
# fp8train / torchao, each ratio written to the digits its range allows.
#
#   scripts/curve-bench.sh --fp8train build-device/fp8train --commit abc1234 --deadline $(( $(date +%s) + 480 ))
#   scripts/curve-bench.sh --fp8train build-device/fp8train --models llama3-3b --repeats 3
#
# How the rounds interleave: each peer process compiles once, then times --repeats rounds of
# --steps steps, waiting at a gate file before each; between its rounds the fp8train rows it is
# the peer of (bf16 <-> torch-bf16; delayed, current <-> torchao-tensorwise; block, rowwise <->
# torchao-rowwise) run as
# one `fp8train bench` process, the order alternating per round (peer first in odd rounds,
# fp8train first in even ones). With --autotune both, every row also runs without GEMM autotuning
# (the peers have none), once per round, as one more process of all the rows. A waiting peer
# holds its weights and AdamW state (12 bytes/parameter; its cached activations are returned:
# a 3B peer waits with about 38 GiB beside fp8train's run), so --parallel peers compile at once
# and stay resident together (auto: 3 for gpt2-124m, else 1).
# Costs, seen on an H200: a peer's start + compile + warm-up took 55 s for gpt2-124m (PyTorch
# bf16) and 132 s for llama3-3b (46 s of it building the model on the CPU, since moved to the
# GPU); a 5-step round took 2 s (124M) and 4 s (3B). Not yet seen: the float8 peers' compiles
# and fp8train's processes (4 per model and round). Estimates with the defaults: gpt2-124m 3-4
# min, llama3-1b 6-8 min, llama3-3b 8-10 min (--autotune on halves fp8train's
# share), so give a 10-minute device call one model (two small ones at most) and a --deadline;
# the table reads every MODEL folder under --out, several --out folders through
# `scripts/peer_table.py --curve DIR...`. The peers need torchao (python3 -m pip install torchao).
# --deadline (seconds since the epoch): no process runs past it (each gets `timeout` of the time
# left); a peer or fp8train process that would start with less time left than its estimate is
# skipped; what did not run is recorded as not run. The
# commit recorded: --commit, else $FP8T_COMMIT, else `git describe --always --dirty` (a device
# copy of the tree may have no .git: pass --commit there).
#
# Options: --models LIST (gpt2-124m,llama3-1b,llama3-3b; llama3-8b needs more memory than one
# card), --repeats N (3), --steps N (10 timed per round; fp8train --bench-steps), --warmup N (5:
# fp8train's untimed steps per process; a peer warms up 3 steps (its compile) and 2 more per
# round), --micro-batch N (all models; default each config's), --peers LIST (torch-bf16,
# torchao-tensorwise,torchao-rowwise: the PyTorch peers; the old names bf16, tensorwise and rowwise
# still work, with a note: `rowwise` there is torchao's recipe, fp8train's is --recipes rowwise),
# --recipes LIST (fp8train's FP8 recipes, delayed,current,block; any of `fp8train bench --help`'s),
# --autotune on|off|both (fp8train's train.gemm_autotune: both = every fp8train row also without
# its GEMM autotuning, which the peers do not have; default both), --compile-mode MODE (the peers'
# torch.compile mode, default), --loss chunked|full, --optimizer compiled|eager (the peers'),
# --parallel N|auto, --idle-wait S (60), --commit HASH, --out DIR (${OUT:-/tmp/out}/curve). Outputs: DIR/MODEL/peer-ROW.{json,log},
# DIR/MODEL/fp8train-SLOT-autotune-{on,off}-rR.{json,log} (SLOT: the peer beside it, or all), DIR/environment.json, DIR/curve.md
# and DIR/curve.json (the table), DIR/gpu-busy.txt (timings beside other GPU work, if any).
#
# Mixtures of experts (a config whose moe.experts > 0, e.g. olmoe-1b-7b): the peers are PyTorch bf16
# and torchao's MoE FP8 rowwise training (--peers bf16,rowwise; torchao 0.18 has no other FP8 MoE
# recipe, so every fp8train FP8 row runs beside that peer and is compared with it); both sides route
# forced-balanced (fp8train --set moe.force_balance=true, reference_bench.py --force-balance), or
# with --force-balance off both by their routers. --n-layer N: every model at N blocks on both
# sides (--set model.n_layer=N, --n-layer N), for a shape whose peer does not fit at full depth. A
# peer waiting between its rounds holds its FP32 weights and moments (12 bytes per parameter;
# olmoe-1b-7b: 4.7 GiB per block) beside fp8train's run (16 bytes per parameter with FP32
# moments, 6.3 GiB per block, plus its FP8 copies and activations): by that estimate (not
# measured) 8 blocks fit an H200 and 4 an H100. fp8train's rows keep FP32 AdamW moments, as the
# peers' torch.optim.AdamW does (--set train.moments_dtype=fp32; olmoe-1b-7b ships bf16 moments).
# environment.json and the table record the depth.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
APP=build-device/fp8train
MODELS=gpt2-124m,llama3-1b,llama3-3b
REPEATS=3
STEPS=10
WARMUP=5
BATCH=""
PEERS=torch-bf16,torchao-tensorwise,torchao-rowwise
RECIPES=delayed,current,block
AUTOTUNE=both
CMODE=default
LOSS=chunked
OPTIMIZER=compiled
PARALLEL=auto
IDLE_WAIT=60
DEADLINE=0
COMMIT=${FP8T_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo "unknown (pass --commit)")}
OUTDIR=${OUT:-/tmp/out}/curve
PY=${FP8T_PYTHON:-python3}
NLAYER=""
FORCE_BALANCE=on
while [ $# -gt 0 ]; do
  case "$1" in
    --fp8train) APP="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --micro-batch) BATCH="$2"; shift 2 ;;
    --peers) PEERS="$2"; shift 2 ;;
    --recipes) RECIPES="$2"; shift 2 ;;
    --autotune) AUTOTUNE="$2"; shift 2 ;;
    --compile-mode) CMODE="$2"; shift 2 ;;
    --loss) LOSS="$2"; shift 2 ;;
    --optimizer) OPTIMIZER="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --idle-wait) IDLE_WAIT="$2"; shift 2 ;;
    --deadline) DEADLINE="$2"; shift 2 ;;
    --commit) COMMIT="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --n-layer) NLAYER="$2"; shift 2 ;;
    --force-balance) FORCE_BALANCE="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "curve-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bad() { echo "curve-bench.sh: $*" >&2; exit 2; }
case "$AUTOTUNE" in on|off|both) ;; *) bad "--autotune is on, off or both, not '$AUTOTUNE'" ;; esac
case "$FORCE_BALANCE" in on|off) ;; *) bad "--force-balance is on or off, not '$FORCE_BALANCE'" ;; esac
[ -z "$NLAYER" ] || [[ "$NLAYER" =~ ^[1-9][0-9]*$ ]] || bad "--n-layer must be a positive whole number, not '$NLAYER'"
[ "$PARALLEL" = auto ] || [[ "$PARALLEL" =~ ^[1-9][0-9]*$ ]] || bad "--parallel is auto or a positive whole number, not '$PARALLEL'"
for n in REPEATS STEPS WARMUP IDLE_WAIT DEADLINE; do
  [[ "${!n}" =~ ^[0-9]+$ ]] || bad "--$(echo "$n" | tr 'A-Z_' 'a-z-') must be a whole number, not '${!n}'"
done
if [ "$REPEATS" -lt 1 ] || [ "$STEPS" -lt 1 ]; then bad "--repeats and --steps are at least 1"; fi
[ -z "$BATCH" ] || [[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || bad "--micro-batch must be a positive whole number, not '$BATCH'"
IFS=, read -ra model_list <<<"$MODELS"
for m in "${model_list[@]}"; do [ -f "configs/$m.yaml" ] || bad "--models: no configs/$m.yaml"; done
# The peers are PyTorch's, named by their framework: torch-bf16, torchao-tensorwise,
# torchao-rowwise. The names before those (bf16, tensorwise, rowwise) are taken with a note, since
# `rowwise` is also fp8train's own recipe (--recipes rowwise).
IFS=, read -ra given_peers <<<"$PEERS"
peer_list=()
for p in "${given_peers[@]}"; do
  case "$p" in
    torch-bf16|torchao-tensorwise|torchao-rowwise) peer_list+=("$p") ;;
    bf16) peer_list+=(torch-bf16); echo "curve-bench.sh: --peers bf16 is the peer torch-bf16 (PyTorch bf16)" >&2 ;;
    tensorwise|rowwise)
      peer_list+=("torchao-$p")
      echo "curve-bench.sh: --peers $p is torchao's float8 $p recipe, the peer torchao-$p$([ "$p" = rowwise ] && echo "; fp8train's own rowwise recipe is --recipes rowwise")" >&2 ;;
    *) bad "--peers: unknown peer '$p' (torch-bf16, torchao-tensorwise, torchao-rowwise)" ;;
  esac
done
PEERS=$(IFS=,; echo "${peer_list[*]}")
IFS=, read -ra recipe_list <<<"$RECIPES"
if [ -x "$APP" ]; then
  # fp8train's recipes are its registry's: it refuses an unknown one naming them (exit 2).
  for r in "${recipe_list[@]}"; do
    why=$("$APP" --fp8-recipe "$r" --print-config 2>&1 >/dev/null) || { why=${why#*error*] }; bad "--recipes: ${why:-$APP refused the recipe '$r'}"; }
  done
else
  echo "curve-bench.sh: no fp8train at $APP: its rows are recorded as not run" >&2
fi
mkdir -p "$OUTDIR"
rm -f "$OUTDIR/gpu-busy.txt"
log() { echo "[curve-bench $(date +%H:%M:%S)] $*"; }
# shellcheck source=scripts/gpu-idle.sh disable=SC2034  # IDLE_WAIT: read there
source scripts/gpu-idle.sh
contains() { [[ ",$1," == *",$2,"* ]]; }
left() { [ "$DEADLINE" -gt 0 ] && echo $(( DEADLINE - $(date +%s) )) || echo 999999; }
# yaml_key FILE KEY: a scalar of configs/*.yaml (first "  KEY: value" line).
yaml_key() { awk -v k="$2" '$1 == k":" {print $2; exit}' "$1"; }

"$PY" - "$OUTDIR/environment.json" "$COMMIT" "$NLAYER" "$FORCE_BALANCE" <<'PY'
import json, subprocess, sys
env = {"commit": sys.argv[2], "n_layer": int(sys.argv[3]) if sys.argv[3] else None,
       "moe_routing": "forced-balanced" if sys.argv[4] == "on" else "learned"}
try:
    import torch
    env.update(torch=torch.__version__, cuda=torch.version.cuda,
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")
except ImportError:
    env["torch"] = None
try:
    import torchao
    env["torchao"] = torchao.__version__
except ImportError:
    env["torchao"] = None
try:
    env["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                        "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except OSError:
    env["nvidia_smi"] = None
json.dump(env, open(sys.argv[1], "w"), indent=2)
print("environment:", json.dumps(env))
PY

# Estimates (s) that decide whether something still fits before --deadline: a peer's compile
# and warm-up by model size, then the measured length of the same item's last run.
# FP8T_COMPILE_ESTIMATE (s) replaces the compile estimate (tests).
compile_estimate() { [ -n "${FP8T_COMPILE_ESTIMATE:-}" ] && { echo "$FP8T_COMPILE_ESTIMATE"; return; }; case "$1" in gpt2-124m) echo 45 ;; llama3-1b) echo 75 ;; llama3-3b) echo 120 ;; *) echo 180 ;; esac; }
declare -A LAST=()
fits() {  # fits KEY DEFAULT: the time left covers KEY's last duration (or DEFAULT) with 10% to spare
  local need=${LAST[$1]:-$2}
  [ $(( $(left) * 10 )) -ge $(( need * 11 )) ]
}

# The fp8train rows a peer stands beside: bf16 <-> torch-bf16, delayed,current <-> torchao-tensorwise,
# block,rowwise <-> torchao-rowwise (fp8train's rowwise is torchao's recipe; block the nearest to it).
slot_args() {
  local want=() r
  # A mixture of experts: every FP8 recipe beside torchao's MoE rowwise peer, none beside tensorwise.
  [ "$MOE" -gt 0 ] && case "$1" in
    *tensorwise) return 0 ;;
    *rowwise) echo "--precisions fp8 --recipes $RECIPES"; return ;;
  esac
  case "$1" in
    all) echo "--precisions bf16,fp8 --recipes $RECIPES"; return ;;
    torch-bf16) echo "--precisions bf16"; return ;;
    torchao-tensorwise) for r in delayed current; do contains "$RECIPES" $r && want+=("$r"); done ;;
    torchao-rowwise) for r in block rowwise; do contains "$RECIPES" $r && want+=("$r"); done ;;
  esac
  [ ${#want[@]} -gt 0 ] && echo "--precisions fp8 --recipes $(IFS=,; echo "${want[*]}")"
}
# The GEMM-autotune setting of the rows timed beside their peers; with --autotune both the other
# setting's rows (off) run once per round as one process of every row (slot "all").
PRIMARY=$([ "$AUTOTUNE" = off ] && echo off || echo on)

# not_run FILE KEY=VALUE...: a record that names what did not run and why (the table lists it).
not_run() {
  local file=$1; shift
  "$PY" -c 'import json, sys; d = dict(a.split("=", 1) for a in sys.argv[2:]); json.dump(d, open(sys.argv[1], "w"))' \
    "$file" "$@"
}

# One fp8train bench process: the rows of slot `s` for model `m`, round r, autotune a.
run_fp8train() {
  local m=$1 s=$2 r=$3 a=$4 args name key t0 rc
  args=$(slot_args "$s") || return 0
  [ -n "$args" ] || return 0
  name="$OUTDIR/$m/fp8train-$s-autotune-$a-r$r"
  key="fp8-$m-$s-$a"
  local why=""
  [ -x "$APP" ] || why="no fp8train at $APP"
  [ -z "$why" ] && ! fits "$key" 30 && why="not started: $(left) s left before the deadline"
  if [ -n "$why" ]; then
    log "fp8train $m $s autotune $a round $r: $why"
    not_run "$name.json" not_run="$why" slot="$s" autotune="$a" round="$r"
    return 0
  fi
  local split
  read -ra split <<<"$args"
  local cmd=("$APP" bench --config "configs/$m.yaml" "${split[@]}" --bench-steps "$STEPS" --bench-warmup "$WARMUP"
             --set "train.micro_batch_size=$MB" --set "train.gemm_autotune=$([ "$a" = on ] && echo true || echo false)"
             "${FP8_SETS[@]}" --json "$name.json")
  await_idle_gpu "fp8train $m $s (autotune $a, round $r)"
  log "round $r: ${cmd[*]}"
  t0=$(date +%s)
  timeout "$(left)" "${cmd[@]}" >"$name.log" 2>&1
  rc=$?
  LAST[$key]=$(( $(date +%s) - t0 ))
  if [ $rc -ne 0 ] || [ ! -s "$name.json" ]; then
    log "fp8train $m $s round $r failed (rc $rc, see $name.log)"
    not_run "$name.json" not_run="failed (rc $rc, see $(basename "$name").log)" slot="$s" autotune="$a" round="$r"
  fi
}

peer_args() {  # the reference_bench.py mode and recipe of peer p
  case "$1" in torch-bf16) echo "--mode compile" ;; *) echo "--mode float8 --float8-recipe ${1#torchao-}" ;; esac
}

start_peer() {
  local m=$1 p=$2
  local f="$OUTDIR/$m/peer-$p"
  rm -f "$OUTDIR/$m/go-$p"*
  # shellcheck disable=SC2046  # peer_args: words
  PYTHONUNBUFFERED=1 FP8T_COMMIT="$COMMIT" timeout "$(left)" "$PY" scripts/reference_bench.py --model "$m" \
    $(peer_args "$p") --compile-mode "$CMODE" --loss "$LOSS" --optimizer "$OPTIMIZER" --micro-batch "$MB" \
    --seq-len "$SEQ" --steps "$STEPS" --warmup 3 --rounds "$REPEATS" --wait-for "$OUTDIR/$m/go-$p" \
    "${PEER_SETS[@]}" --json "$f.json" >"$f.log" 2>&1 &
  echo $! >"$f.pid"
}
peer_pid() { cat "$OUTDIR/$1/peer-$2.pid" 2>/dev/null; }
alive() { local pid; pid=$(peer_pid "$1" "$2"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
gate() { [ "$3" -eq 1 ] && echo "$OUTDIR/$1/go-$2" || echo "$OUTDIR/$1/go-$2.$3"; }
peer_not_run() {  # a peer without any timed round (its JSON is written after each round)
  local m=$1 p=$2 why=$3
  [ -s "$OUTDIR/$m/peer-$p.json" ] && return 0
  not_run "$OUTDIR/$m/peer-$p.json" not_run="$why" peer="$p" model="$m"
}

# Round r of peer p: open its gate, wait until it waits at the next one (or ends).
time_peer_round() {
  local m=$1 p=$2 r=$3 next t0 key="peer-$1-$2"
  alive "$m" "$p" || return 0
  if ! fits "$key" 20; then
    log "peer $m $p round $r: not run ($(left) s left); stopped"
    kill "$(peer_pid "$m" "$p")" 2>/dev/null
    return 0
  fi
  await_idle_gpu "peer $m $p (round $r)"
  log "round $r: timing peer $m $p"
  t0=$(date +%s)
  touch "$(gate "$m" "$p" "$r")"
  next="$(gate "$m" "$p" $(( r + 1 ))).ready"
  while alive "$m" "$p" && { [ "$r" -eq "$REPEATS" ] || [ ! -e "$next" ]; }; do sleep 0.2; done
  LAST[$key]=$(( $(date +%s) - t0 ))
  tail -1 "$OUTDIR/$m/peer-$p.log"
}

run_model() {
  local m=$1 cfg="configs/$1.yaml" batch i p r a
  SEQ=$(yaml_key "$cfg" seq_len)
  MB=${BATCH:-$(yaml_key "$cfg" micro_batch_size)}
  # The settings both sides share beyond the shape: depth, MoE routing, FP32 AdamW moments.
  MOE=$(yaml_key "$cfg" experts); MOE=${MOE:-0}
  FP8_SETS=(--set train.moments_dtype=fp32)
  PEER_SETS=()
  if [ -n "$NLAYER" ]; then
    FP8_SETS+=(--set "model.n_layer=$NLAYER")
    PEER_SETS+=(--n-layer "$NLAYER")
  fi
  if [ "$MOE" -gt 0 ] && [ "$FORCE_BALANCE" = on ]; then
    FP8_SETS+=(--set moe.force_balance=true)
    PEER_SETS+=(--force-balance)
  elif [ "$MOE" -gt 0 ]; then
    FP8_SETS+=(--set moe.force_balance=false)
    PEER_SETS+=(--no-force-balance)
  fi
  mkdir -p "$OUTDIR/$m"
  rm -f "$OUTDIR/$m"/*.pid "$OUTDIR/$m"/*.json "$OUTDIR/$m"/go-*  # this run's results only
  log "$m: micro-batch $MB x $SEQ tokens on both sides, $REPEATS rounds of $STEPS steps"
  # The fp8train slots without a peer (--peers leaves it out) still run, alone, each round.
  local lone=()
  for p in torch-bf16 torchao-tensorwise torchao-rowwise; do contains "$PEERS" "$p" || lone+=("$p"); done
  local order=("${peer_list[@]}") parallel=$PARALLEL
  # auto: gpt2-124m's three peers compile at once (8.6 GiB each at their peak on an H200); larger
  # models one at a time (three 1B warm-ups at once would need about 3 x 60 GiB).
  [ "$parallel" = auto ] && { [ "$m" = gpt2-124m ] && parallel=3 || parallel=1; }
  for ((i = 0; i < ${#order[@]}; i += parallel)); do
    batch=("${order[@]:i:parallel}")
    local started=()
    for p in "${batch[@]}"; do
      if fits "compile-$m" "$(compile_estimate "$m")"; then
        log "$m: starting peer $p (compiles now)"
        start_peer "$m" "$p"
        started+=("$p")
      else
        peer_not_run "$m" "$p" "not started: $(left) s left before the deadline, its compile takes about $(compile_estimate "$m") s"
      fi
    done
    local t0; t0=$(date +%s)
    for p in "${started[@]}"; do
      until [ -e "$(gate "$m" "$p" 1).ready" ] || ! alive "$m" "$p"; do sleep 0.5; done
      alive "$m" "$p" || peer_not_run "$m" "$p" "ended before its timed steps (killed at the deadline or failed; see peer-$p.log)"
    done
    LAST[compile-$m]=$(( $(date +%s) - t0 ))
    for ((r = 1; r <= REPEATS; r++)); do
      for p in "${batch[@]}"; do
        if [ $((r % 2)) -eq 1 ]; then
          time_peer_round "$m" "$p" "$r"
          run_fp8train "$m" "$p" "$r" "$PRIMARY"
        else
          run_fp8train "$m" "$p" "$r" "$PRIMARY"
          time_peer_round "$m" "$p" "$r"
        fi
      done
      [ "$i" -eq 0 ] && [ "$AUTOTUNE" = both ] && run_fp8train "$m" all "$r" off
    done
    for p in "${started[@]}"; do
      while alive "$m" "$p"; do sleep 0.2; done
      peer_not_run "$m" "$p" "ended before its timed steps (killed at the deadline or failed; see peer-$p.log)"
    done
  done
  for ((r = 1; r <= REPEATS; r++)); do
    for p in "${lone[@]}"; do run_fp8train "$m" "$p" "$r" "$PRIMARY"; done
    [ ${#order[@]} -eq 0 ] && [ "$AUTOTUNE" = both ] && run_fp8train "$m" all "$r" off
  done
  rm -f "$OUTDIR/$m"/go-* "$OUTDIR/$m"/*.pid
}

for m in "${model_list[@]}"; do run_model "$m"; done
"$PY" scripts/peer_table.py --curve "$OUTDIR" --json "$OUTDIR/curve.json" | tee "$OUTDIR/curve.md"
[ -s "$OUTDIR/gpu-busy.txt" ] && { echo "not alone on the GPU when timed:"; sed 's/^/  /' "$OUTDIR/gpu-busy.txt"; }
exit 0
