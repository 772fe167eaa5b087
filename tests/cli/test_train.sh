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
echo "ok"
