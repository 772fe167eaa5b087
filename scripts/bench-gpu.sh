#!/usr/bin/env bash
# The standard end-to-end benchmark on a CUDA GPU: `fp8train bench` (bf16 and fp8 side by side,
# synthetic tokens, one micro-batch per optimizer step) for the GPT-2-124M-like and the 1.3B
# config. Prints each table and writes bench-124m.json / bench-1.3b.json into --out.
#
#   scripts/bench-gpu.sh                                  # both models, build/fp8train
#   scripts/bench-gpu.sh --fp8train build-device/fp8train --out /tmp/out --only 1.3b
#   scripts/bench-gpu.sh --steps 30 --warmup 10 -- --set fp8.min_features_product=0
#   scripts/bench-gpu.sh --nproc 2 --only 1.3b           # data-parallel over 2 GPUs (torchrun)
# Arguments after -- go to every `fp8train bench` call.
set -euo pipefail
cd "$(dirname "$0")/.."
APP=build/fp8train
OUTDIR=${OUT:-bench-results}
STEPS=20
WARMUP=5
ONLY="124m,1.3b"
NPROC=1
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fp8train) APP="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --nproc) NPROC="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n "2,11p" "$0"; exit 0 ;;
    *) echo "bench-gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$APP" ] || { echo "bench-gpu.sh: $APP is not built (scripts/setup.sh, or --fp8train PATH)" >&2; exit 2; }
mkdir -p "$OUTDIR"
COMMIT=${FP8T_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "date $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
LAUNCH=()
SUFFIX=""
if [ "$NPROC" -gt 1 ]; then
  PY=${FP8T_PYTHON:-python3}
  LAUNCH=("$PY" -m torch.distributed.run --nproc-per-node "$NPROC" --no-python)
  SUFFIX="-${NPROC}gpu"
fi
rc=0
for model in 124m 1.3b; do
  [[ ",$ONLY," == *",$model,"* ]] || continue
  case "$model" in
    124m) config=configs/gpt2-124m.yaml ;;
    1.3b) config=configs/gpt-1.3b.yaml ;;
  esac
  echo
  echo "== $model: ${LAUNCH[*]} $APP bench --config $config --bench-steps $STEPS --bench-warmup $WARMUP ${EXTRA[*]}"
  "${LAUNCH[@]}" "$APP" bench --config "$config" --bench-steps "$STEPS" --bench-warmup "$WARMUP" \
    --json "$OUTDIR/bench-$model$SUFFIX.json" "${EXTRA[@]}" || rc=$?
done
exit $rc
