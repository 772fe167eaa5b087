# Shared helpers for the CLI end-to-end tests (sourced). ctest sets FP8TRAIN (the program)
# and FP8T_SOURCE_DIR (the repository).
set -euo pipefail
: "${FP8TRAIN:?FP8TRAIN must point to the fp8train binary}"
: "${FP8T_SOURCE_DIR:?FP8T_SOURCE_DIR must point to the repository}"
CONFIG="$FP8T_SOURCE_DIR/configs/default.yaml"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fp8train-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }
# json_get FILE EXPR: evaluate a python expression on the parsed JSON `d`.
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# losses FILE: the training losses of a metrics.jsonl, one per line.
losses() { python3 -c "import json,sys; [print(repr(r['loss'])) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r]" "$1"; }
# A short run of the default config: fp8train_short RUN_NAME [flags...]
fp8train_short() {
  local name=$1; shift
  "$FP8TRAIN" --config "$CONFIG" --out-dir "$WORK/runs" --run-name "$name" --quiet \
    --steps 60 --set train.warmup_steps=5 --set train.eval_interval=0 --set train.eval_batches=2 "$@"
}
# A TCP port on the loopback interface that was free a moment ago.
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
# launch_by_hand NPROC ARGS...: one background process per rank with torchrun's variables
# (rank r logs to rank<r>.log); returns the last non-zero exit code.
launch_by_hand() {
  local n=$1; shift
  local port; port=$(free_port)
  local pids=() rc=0
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$FP8TRAIN" "$@" > "rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
# relclose A B TOL: every line of A within TOL (relative) of the same line of B.
relclose() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def rows(path, key):
    return [r[key] for r in map(json.loads, open(path)) if key in r]
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for key in ("loss", "val_loss"):
    x, y = rows(a, key), rows(b, key)
    assert len(x) == len(y) and x, f"{key}: {len(x)} vs {len(y)} rows"
    worst = max(abs(p - q) / abs(q) for p, q in zip(x, y))
    print(f"{key}: {len(x)} rows, largest relative difference {worst:.2e} (tolerance {tol:g})")
    assert worst <= tol, f"{key} differs by {worst} > {tol}"
PY
}

# Tiny runs (test_reliability.sh, test_robustness.sh): a one-layer model that trains in
# milliseconds per step, in $WORK/runs; expect_rc checks a command's exit code, its output kept
# in $WORK/out.txt for out_has.
TINY=(--quiet --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=16
      --set train.micro_batch_size=2 --set train.warmup_steps=0 --set train.eval_interval=0
      --set train.eval_batches=1 --set train.log_interval=1)
tiny() {
  local name=$1; shift
  "$FP8TRAIN" --out-dir "$WORK/runs" --run-name "$name" "${TINY[@]}" "$@"
}
expect_rc() {  # expect_rc CODE LABEL command...
  local want=$1 label=$2; shift 2
  set +e; "$@" >"$WORK/out.txt" 2>&1; local rc=$?; set -e
  [ "$rc" = "$want" ] || { cat "$WORK/out.txt" >&2; fail "$label: exit $rc, expected $want"; }
}
out_has() { grep -q -- "$1" "$WORK/out.txt" || { cat "$WORK/out.txt" >&2; fail "output lacks '$1'"; }; }
