# scripts/convergence.sh on a tiny model: --seeds 2 trains each precision twice and reports the
# mean and spread per precision; a target that is met exits 0, one that is missed exits 1 (the
# failure path checked with --no-train on the same runs and an unreachable --target).
source "$(dirname "$0")/lib.sh"
python3 -c "import random; random.seed(3); print(''.join(random.choice('abcdefgh \n') for _ in range(40000)))" > book.txt
tiny=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=32
      --set model.dropout=0 --set train.micro_batch_size=4 --set train.eval_interval=0 --set train.eval_batches=2
      --set train.warmup_steps=2)
conv() { bash "$FP8T_SOURCE_DIR/scripts/convergence.sh" "$WORK/book.txt" --steps 12 --seeds 2 --out "$WORK/conv" \
           --fp8train "$FP8TRAIN" "$@" -- "${tiny[@]}"; }
conv --target 1000 > met.txt 2>&1 || { cat met.txt; fail "a target of +1000% was missed"; }
grep -q "^bf16: final val loss mean .* over 2 seed(s), std " met.txt || { cat met.txt; fail "no mean/std line for bf16"; }
grep -q "^fp8 vs bf16 mean final val loss: .*: met$" met.txt || { cat met.txt; fail "no verdict for fp8"; }
python3 - conv/convergence.json <<'PY' || fail "convergence.json"
import json, sys
d = json.load(open(sys.argv[1]))
for label in ("bf16", "fp8"):
    r = d[label]
    assert r["seeds"] == 2 and len(r["runs"]) == 2, r
    vals = [x["final_val_loss"] for x in r["runs"]]
    assert vals[0] != vals[1], f"{label}: the two seeds gave one loss: {vals}"
    assert abs(r["final_val_loss_mean"] - sum(vals) / 2) < 1e-12 and r["final_val_loss_std"] > 0, r
assert d["missed"] == [] and d["target_percent"] == 1000
PY
set +e
conv --no-train --target -1000 > missed.txt 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat missed.txt; fail "an unreachable target: exit $rc, expected 1"; }
grep -q "MISSED" missed.txt && grep -q "target missed: fp8" missed.txt || { cat missed.txt; fail "the miss is not named"; }
echo "test_convergence: ok"
