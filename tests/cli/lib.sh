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
