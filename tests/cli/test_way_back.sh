#!/usr/bin/env bash
# The way back from a divergence (lib/checkpoint/health.h, history.h), the scenarios of issues 54
# and 62, at the shipped rotation (train.keep_checkpoints 2, the default): six steps with a
# checkpoint after each, then --resume with train.lr 1e6. Step 7 (lr 1e6) is finite and ruins the
# weights; step 8, the first computed from them, is skipped. The message must recommend
# checkpoint 6 (its next step, 7, was healthy), not 7, and checkpoint 6 must still be on disk:
# the rotation keeps the newest healthy checkpoint until a newer one is known healthy (it
# deleted it, before issue 62, while the run went bad). Resuming from 6 with a sane learning
# rate must not diverge. The divergence is seen at log step 20 (train.log_interval 10): the
# message says how many steps in a row were skipped.
# The same rule under train.keep_checkpoints 1, time-based checkpoints (checkpoint_every_min),
# 2 ranks (DDP) and ZeRO-3 (its shard files), each: six steps, lr 1e6, exit 3 naming the kept
# checkpoint 6, and --resume-from 6 at a sane lr trains on.
source "$(dirname "$0")/lib.sh"

# The tiny model with the default warmup (20 steps) and log interval (10), as the issue ran it;
# train.keep_checkpoints at its default, 2.
RUN=(--steps 20 --set train.warmup_steps=20 --set train.checkpoint_interval=1 --set train.log_interval=10)

# Issue 62's probe, configs/default.yaml (FP8) at its defaults: step 8 is finite but a loss spike and
# is checkpointed, step 9 is skipped; the rotation used to keep 7 and 8 and delete 6.
expect_rc 0 "fp8: six good steps" tiny fp8 --config "$CONFIG" "${RUN[@]}" --stop-after 6
expect_rc 3 "fp8: lr 1e6" tiny fp8 --config "$CONFIG" --resume "${RUN[@]}" --set train.lr=1e6
out_has "Go back to step 6 ($WORK/runs/fp8/checkpoint.step-6.pt): step 7, trained from its weights, was healthy"
out_has "Not step 7: step 8, trained from its weights, was not healthy"
[ -f runs/fp8/checkpoint.step-6.pt ] || fail "fp8: the healthy checkpoint 6 was deleted: $(ls runs/fp8)"
expect_rc 0 "fp8: --resume-from 6 with lr 1e-3" tiny fp8 --config "$CONFIG" --resume-from 6 "${RUN[@]}" \
  --set train.lr=1e-3 --set train.min_lr=1e-4 --stop-after 4
python3 -c "import json, math, sys; r = [r for r in map(json.loads, open(sys.argv[1])) if 'loss' in r][-1]; \
assert r['step'] == 10 and math.isfinite(r['loss']) and r['skipped_steps'] == 0, r" runs/fp8/metrics.jsonl \
  || fail "fp8: the run from checkpoint 6 did not train on"

# Issue 54's scenario, in fp32 (the built-in defaults): step 8 is skipped.
expect_rc 0 "six good steps" tiny back "${RUN[@]}" --stop-after 6
expect_rc 3 "lr 1e6" tiny back --resume "${RUN[@]}" --set train.lr=1e6
out_has "diverged at step 8"
out_has "13 steps in a row (8 to 20)"
out_has "at the first log step (train.log_interval 10)"
out_has "Go back to step 6 ($WORK/runs/back/checkpoint.step-6.pt)"
out_has "step 7, trained from its weights, was healthy"
out_has "Not step 7: step 8, trained from its weights, was not healthy"
out_has "--resume-from 6 "
[ -f runs/back/checkpoint.step-6.pt ] || fail "the healthy checkpoint 6 was deleted: $(ls runs/back)"
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
# The rows fall where an uninterrupted run's do (train.log_interval 10): the resumed step 7 is no row.
assert [r["step"] for r in after] == [10], [r["step"] for r in rows]
assert all(r["loss"] is not None and math.isfinite(r["loss"]) and r["skipped_steps"] == 0 for r in after), after
checks = {r["checkpoint_check"]["checkpoint_step"]: r["checkpoint_check"] for r in map(json.loads, open(sys.argv[1]))
          if "checkpoint_check" in r}
assert all(checks[s]["healthy"] for s in (6, 7, 8, 9)), checks
PY

# ---- the rule under other rotations and layouts ------------------------------------------------
# The same schedule, every step logged (TINY): the run stops at the 5th skipped step in a row
# (train.max_skipped_steps 5), after step 12.
SHORT=(--steps 20 --set train.warmup_steps=20)
# way_back NAME LAUNCH FLAGS...: six good steps, lr 1e6 (exit 3), the message names the kept
# checkpoint 6 and it is on disk; then --resume-from 6 at lr 1e-3 trains two steps on. LAUNCH is
# "one" (a process) or "two" (2 ranks, Gloo, by hand; rank 0's log is the output).
way_back() {
  local name=$1 launch=$2; shift 2
  run_as() {
    local want=$1 label=$2; shift 2
    if [ "$launch" = one ]; then
      expect_rc "$want" "$name: $label" tiny "$name" "${SHORT[@]}" "$@"
    else
      set +e; launch_by_hand 2 --out-dir "$WORK/runs" --run-name "$name" "${TINY[@]}" "${SHORT[@]}" "$@"; local rc=$?; set -e
      cp rank0.log "$WORK/out.txt"
      [ "$rc" = "$want" ] || { cat rank*.log >&2; fail "$name: $label: exit $rc, expected $want"; }
    fi
  }
  run_as 0 "six good steps" "$@" --stop-after 6
  run_as 3 "lr 1e6" "$@" --resume --set train.lr=1e6
  out_has "Go back to step 6 ($WORK/runs/$name/checkpoint.step-6.pt): step 7, trained from its weights, was healthy"
  [ -f "runs/$name/checkpoint.step-6.pt" ] || fail "$name: the healthy checkpoint 6 was deleted: $(ls "runs/$name")"
  if [[ " $* " == *" --zero 3 "* ]]; then  # and its ZeRO-3 shard files
    ls "runs/$name/checkpoint.shard-0-of-2.step-6.pt" "runs/$name/checkpoint.shard-1-of-2.step-6.pt" > /dev/null \
      || fail "$name: the shard files of the kept checkpoint 6 are gone: $(ls "runs/$name")"
  fi
  run_as 0 "--resume-from 6 with lr 1e-3" "$@" --resume-from 6 --set train.lr=1e-3 --set train.min_lr=1e-4 --stop-after 2
  python3 - "runs/$name/metrics.jsonl" <<'PY' || fail "$name: metrics.jsonl after --resume-from 6"
import json, math, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and r["step"] > 6]
assert [r["step"] for r in rows] == [7, 8] and all(math.isfinite(r["loss"]) and not r["skipped_steps"] for r in rows), rows
PY
}
way_back keep1 one --set train.checkpoint_interval=1 --set train.keep_checkpoints=1
# keep 1 holds checkpoint.pt and, until the step after it judges it, the healthy one before it.
[ "$(ls runs/keep1 | grep -c '^checkpoint.step-')" = 1 ] || fail "keep_checkpoints 1 holds more than one older checkpoint: $(ls runs/keep1)"
# Checkpoints by time alone (every step: 1e-6 minutes), as checkpoint_every_min writes them.
way_back minutes one --set train.checkpoint_interval=0 --set train.checkpoint_every_min=0.000001
way_back ddp two --set train.checkpoint_interval=1
way_back zero3 two --set train.checkpoint_interval=1 --zero 3
echo "ok"
