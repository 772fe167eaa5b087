#!/usr/bin/env bash
# The way back from a divergence (lib/checkpoint/health.h), the scenario of issue 54: six
# steps with a checkpoint after each, then --resume with train.lr 1e6. Step 7 (lr 1e6) is finite
# and ruins the weights; step 8, the first computed from them, is skipped. The message must
# recommend checkpoint 6 (its next step, 7, was healthy), not 7, and resuming from 6 with a sane
# learning rate must not diverge. The divergence is seen at log step 20 (train.log_interval 10):
# the message says how many steps in a row were skipped.
source "$(dirname "$0")/lib.sh"

# The tiny model with the default warmup (20 steps) and log interval (10), as the issue ran it.
RUN=(--steps 20 --set train.warmup_steps=20 --set train.checkpoint_interval=1 --set train.keep_checkpoints=20
     --set train.log_interval=10)
expect_rc 0 "six good steps" tiny back "${RUN[@]}" --stop-after 6
expect_rc 3 "lr 1e6" tiny back --resume "${RUN[@]}" --set train.lr=1e6
out_has "diverged at step 8"
out_has "13 steps in a row (8 to 20)"
out_has "at the first log step (train.log_interval 10)"
out_has "Go back to step 6"
out_has "step 7, trained from its weights, was healthy"
out_has "Not step 7: step 8, trained from its weights, was not healthy"
out_has "--resume-from 6 "
grep -q '"checkpoint_check"' runs/back/metrics.jsonl || fail "metrics.jsonl has no checkpoint verdicts"
# What the old message recommended: checkpoint 7 diverges again, at its next step, from lr 1e-3.
cp -r runs/back runs/seven
expect_rc 3 "--resume-from 7 with lr 1e-3" tiny seven --resume-from 7 "${RUN[@]}" --set train.lr=1e-3 \
  --set train.min_lr=1e-4
out_has "diverged at step 8"
expect_rc 0 "--resume-from 6 with lr 1e-3" tiny back --resume-from 6 "${RUN[@]}" --set train.lr=1e-3 \
  --set train.min_lr=1e-4 --stop-after 4
python3 - runs/back/metrics.jsonl <<'PY' || fail "metrics.jsonl after --resume-from 6"
import json, math, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
after = [r for r in rows if r["step"] > 6]
assert [r["step"] for r in after] == [7, 10], [r["step"] for r in rows]
assert all(r["loss"] is not None and math.isfinite(r["loss"]) and r["skipped_steps"] == 0 for r in after), after
checks = {r["checkpoint_check"]["checkpoint_step"]: r["checkpoint_check"] for r in map(json.loads, open(sys.argv[1]))
          if "checkpoint_check" in r}
assert all(checks[s]["healthy"] for s in (6, 7, 8, 9)), checks
PY
