# precision fp8 (CPU emulation) trains like fp32, and every recipe knob (and fp8.recipe current)
# changes the run.
source "$(dirname "$0")/lib.sh"
fp8train_short fp32 --precision fp32 --steps 120
fp8train_short fp8 --precision fp8 --steps 120 --fp8-stats
a=$(json_get runs/fp32/summary.json 'd["final_loss"]')
b=$(json_get runs/fp8/summary.json 'd["final_loss"]')
# Few-percent agreement: FP8 rounding perturbs each step, but training dynamics are the same.
python3 -c "import sys; sys.exit(0 if abs($b - $a) / $a < 0.05 else 1)" || fail "fp8 final loss $b vs fp32 $a"
json_get runs/fp8/summary.json 'd["fp8_worst"]["most_saturated"][0]["slot"]' >/dev/null || fail "no fp8_worst in summary"
python3 - runs/fp8/metrics.jsonl <<'PY' || fail "metrics.jsonl lacks per-slot FP8 stats"
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "fp8" in r]
assert rows, "no fp8 rows"
s = rows[-1]["fp8"]
assert any(x["slot"].endswith(":grad_output") for x in s)
assert all(0.0 <= x["saturated"] <= 1.0 and 0.0 <= x["underflow"] <= 1.0 and x["scale"] > 0 for x in s)
PY
# 20 steps: every knob below moves the loss by the second row (step 10; seen at 20 and 40 steps).
fp8train_short ref --precision fp8 --steps 20
i=0
for knob in "--fp8-format E4M3" "--fp8-amax-compute-algo most_recent" "--fp8-margin 2" \
            "--fp8-override-linear-precision 0,0,1" "--fp8-amax-history-len 1" "--fp8-interval 4" \
            "--fp8-recipe current --fp8-stats"; do
  i=$((i + 1))
  fp8train_short "knob$i" --precision fp8 --steps 20 $knob
  ! diff -q <(losses "runs/knob$i/metrics.jsonl") <(losses runs/ref/metrics.jsonl) >/dev/null \
    || fail "'$knob' did not change the loss sequence"
done
grep -q "E4M3" runs/knob1/config.yaml || fail "config.yaml does not show fp8_format E4M3"
# Current scaling (knob7): its health statistics, and the recipe in the log.
python3 - runs/knob7/metrics.jsonl <<'PY' || fail "current scaling: no per-slot FP8 stats"
import json, math, sys
s = [r for r in map(json.loads, open(sys.argv[1])) if "fp8" in r][-1]["fp8"]
assert all(math.isfinite(x["scale"]) and x["scale"] > 0 and x["amax"] > 0 for x in s)
PY
grep -q "FP8 recipe: current" runs/knob7/train.log || fail "train.log lacks the recipe line"
# A delayed-only key set explicitly under current: exit 2 naming it, nothing written.
rc=0; "$FP8TRAIN" --config "$CONFIG" --precision fp8 --fp8-recipe current --fp8-amax-history-len 4 \
  --out-dir "$WORK/runs" --run-name bad --quiet 2>err.txt || rc=$?
[ "$rc" = 2 ] && grep -q "fp8.amax_history_len" err.txt && [ ! -e runs/bad ] \
  || fail "an ineffective recipe key: exit $rc, $(cat err.txt)"
echo "ok"
