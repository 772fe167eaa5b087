# Stopping and resuming gives the same loss sequence as an uninterrupted run, bit for bit
# (CPU; fp32 and fp8 emulation, with dropout so the RNG state matters; the fp8 runs keep their
# AdamW moments in bf16, whose beta^t products are rebuilt from the step count on resume).
source "$(dirname "$0")/lib.sh"
for prec in fp32 fp8; do
  common=(--precision "$prec" --steps 30 --set train.log_interval=1 --set model.dropout=0.1)
  [ "$prec" = fp8 ] && common+=(--moments-dtype bf16)
  fp8train_short "straight-$prec" "${common[@]}"
  fp8train_short "split-$prec" "${common[@]}" --stop-after 12
  [ "$(json_get runs/split-$prec/summary.json 'd["status"]')" = stopped ] || fail "stop-after status"
  fp8train_short "split-$prec" "${common[@]}" --resume
  diff <(losses "runs/straight-$prec/metrics.jsonl") <(losses "runs/split-$prec/metrics.jsonl") \
    || fail "$prec: resumed loss sequence differs"
  [ "$(losses "runs/split-$prec/metrics.jsonl" | wc -l)" = 30 ] || fail "$prec: expected 30 loss rows"
done
echo "ok"
