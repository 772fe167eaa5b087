# A short run lowers the loss and fills the run folder; a sweep leaves one folder per run;
# an existing run folder is never silently overwritten.
source "$(dirname "$0")/lib.sh"
for m in 0 1 2; do fp8train_short "m$m" --precision fp8 --fp8-margin "$m" --steps 20; done
for m in 0 1 2; do
  for f in config.yaml train.log metrics.jsonl summary.json checkpoint.pt; do
    [ -s "runs/m$m/$f" ] || fail "runs/m$m/$f missing"
  done
  grep -q "margin: $m" "runs/m$m/config.yaml" || fail "runs/m$m/config.yaml lacks margin $m"
  [ "$(json_get runs/m$m/summary.json 'd["status"]')" = completed ] || fail "m$m status"
done

fp8train_short base --steps 150
first=$(losses runs/base/metrics.jsonl | sed -n 1p)  # sed reads to the end: no broken pipe
final=$(json_get runs/base/summary.json 'd["final_loss"]')
# ln(64) = 4.16 at the start; 150 steps of the default config must at least halve it.
python3 -c "import sys; sys.exit(0 if $final < 0.5 * $first else 1)" || fail "loss did not halve: $first -> $final"
python3 -c "import sys; sys.exit(0 if $final < 2.08 else 1)" || fail "final loss $final not under ln(64)/2"

before=$(md5sum runs/base/summary.json)
set +e; err=$(fp8train_short base --steps 5 2>&1); rc=$?; set -e
[ $rc -eq 2 ] || fail "re-using a run name should exit 2, got $rc"
grep -q -- "--overwrite" <<<"$err" || fail "error does not suggest --overwrite: $err"
[ "$(md5sum runs/base/summary.json)" = "$before" ] || fail "existing run was modified"
fp8train_short base --steps 5 --overwrite || fail "--overwrite failed"
[ "$(json_get runs/base/summary.json 'd["steps"]')" = 5 ] || fail "--overwrite did not replace the run"

# configs/default.yaml trains in FP8 (delayed scaling) and its summary says what FP8 did: 8 of the
# 9 Linears (lm_head is kept in fp8.skip_layers).
[ "$(json_get runs/base/summary.json 'd["precision"]')" = fp8 ] || fail "configs/default.yaml does not train in fp8"
fp8=$(json_get runs/base/summary.json '" ".join(str(d["fp8"][k]) for k in ("recipe", "fp8_linears", "linears", "kept_linears"))')
[ "$fp8" = "delayed 8 9 ['lm_head']" ] || fail "summary.json's fp8: $fp8"

# --quiet silences the progress, not the result: stderr holds the one result line, stdout nothing.
fp8train_short quiet --steps 5 > quiet.out 2> quiet.err || { cat quiet.err; fail "--quiet run failed"; }
[ ! -s quiet.out ] || fail "--quiet wrote to stdout: $(cat quiet.out)"
[ "$(wc -l < quiet.err)" = 1 ] && grep -q "^\[info\] completed: 5 steps, final loss [0-9.]*, val [0-9.]*, .* -> $WORK/runs/quiet$" \
  quiet.err || fail "--quiet: expected the result line alone on stderr, got: '$(cat quiet.err)'"

# The final evaluation says that it starts and shows its batches (here every batch:
# FP8TRAIN_TEST_EVAL_PROGRESS_S=0; 10 s apart otherwise); the FP8 line precedes the result.
FP8TRAIN_TEST_EVAL_PROGRESS_S=0 "$FP8TRAIN" --config "$CONFIG" --out-dir "$WORK/runs" --run-name evals --steps 4 \
  --set train.warmup_steps=0 --set train.eval_interval=0 --set train.eval_batches=3 > evals.out 2> evals.err \
  || { cat evals.err; fail "the evaluation-progress run failed"; }
grep -A3 -F "step 4/4 | final evaluation: 3 validation batches of 16 x 64 tokens" evals.out | grep -q "evaluating: 2/3 batches" \
  && grep -q "^step 4/4 | val_loss " evals.out || { cat evals.out; fail "no evaluation progress"; }
tail -2 evals.err | head -1 | grep -q "fp8 (delayed scaling, HYBRID: E4M3 forward, E5M2 gradients; emulated on the CPU): 8 of 9 Linear layers in FP8" \
  || { cat evals.err; fail "no FP8 summary line before the result"; }
echo "ok"
