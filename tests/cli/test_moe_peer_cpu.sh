# The MoE peer of scripts/reference_bench.py on the CPU (tests/cli/moe_peer_check.py states each
# check and tolerance): forced-balanced routing and the dispatch plan, the layer against a per-token
# reference (output, gradients, the balancing loss's gradient, an expert without tokens), the
# parameter and FLOP counts, torchao's MoE FP8 conversion up to its GPU kernel; then a tiny run
# with the flags scripts/curve-bench.sh passes (gated rounds, --n-layer, --force-balance) whose loss
# falls and whose JSON records the MoE fields, and the refusals of what the MoE peer cannot run.
source "$(dirname "$0")/lib.sh"
PY="$FP8T_SOURCE_DIR/.venv/bin/python3"
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: $PY cannot import torch (scripts/setup.sh installs it)"; exit 0; }
CHECK=$FP8T_SOURCE_DIR/tests/cli/moe_peer_check.py
export OMP_NUM_THREADS=1
"$PY" "$CHECK" routing || fail "forced-balanced routing or the dispatch plan"
"$PY" "$CHECK" layer || fail "the MoE layer differs from its per-token reference"
"$PY" "$CHECK" count || fail "parameter or FLOP counts"
if "$PY" -c 'import torchao.prototype.moe_training' 2>/dev/null; then
  "$PY" "$CHECK" torchao || fail "torchao's MoE FP8 conversion"
else
  echo "SKIP (torchao): torchao.prototype.moe_training does not import ($PY -m pip install torchao==0.18.0)"
fi

# A tiny run as curve-bench.sh starts it: 2 gated rounds (their gates already open), 1 block.
BENCH=$FP8T_SOURCE_DIR/scripts/reference_bench.py
touch go go.2
"$PY" "$BENCH" --model moe-tiny --n-layer 1 --force-balance --mode eager --device cpu --steps 2 --warmup 2 \
  --rounds 2 --wait-for "$WORK/go" --commit abc1234 --json run.json > run.out 2>&1 || { cat run.out; fail "tiny MoE run"; }
# moe-tiny at 1 block: 6 x (3d^2 + d^2 + 4d + E d + k 3 d F + d + V d) + 12 T d = 299904 (d 64, E 8, k 2,
# F 64, V 64, T 32).
[ "$(json_get run.json 'd["arch"], d["n_layer"], d["moe"]["force_balance"], d["moe"]["layers"], d["flops_per_token"], len(d["rounds"])')" \
  = "moe 1 True 1 299904 2" ] || { cat run.json; fail "the JSON's MoE fields"; }
json_get run.json 'd["first_loss"] > d["final_loss"] > 0' | grep -qx True || { cat run.json; fail "the loss does not fall"; }

# What the MoE peer refuses, naming the flag (exit 2).
refuses() {
  local want=$1; shift
  set +e
  "$PY" "$BENCH" --model moe-tiny "$@" > bad.out 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q -- "$want" bad.out || { cat bad.out; fail "'$*': exit $rc, expected 2 naming $want"; }
}
refuses "needs --device cuda" --mode float8 --device cpu
refuses "rowwise only\|FP8_ROWWISE only" --mode float8 --float8-recipe tensorwise
refuses "\-\-top-k must be" --top-k 9
refuses "is dense" --model llama3-1b --experts 4
echo "MoE peer (CPU): routing, plan, layer = reference, counts, torchao conversion, tiny run, refusals"
