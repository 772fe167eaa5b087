# Data-parallel training on the CPU (c10d + Gloo), two processes:
#   (a) the loss sequence matches one process with the same global batch:
#       fp32 within 1e-5 relative (only float summation order differs: the GEMMs see half the
#       rows, and the gradients are summed across ranks); fp8 within 2e-2 relative: at step 1
#       every scale is still 1 and the per-rank gradients, twice as large as one process's,
#       underflow less in E5M2, so the runs separate slightly after the first update (from then
#       on the scales differ by exactly 2 and the FP8 codes match);
#   (b) every rank uses identical FP8 scales after every step (fp8_scale_spread_across_ranks);
#   (c) only rank 0 writes, and only one run folder;
#   (d) a rank that never arrives ends the job with an error after dist.timeout_s, not a hang;
#   (e) stop and resume with the same number of ranks continues bit for bit;
#   (g) ZeRO-1 (--zero 1): the fp32 losses match one process within 1e-5; in fp8 without
#       clipping the DDP run's losses bit for bit, identical scales on both ranks; stop and resume on 2
#       ranks continues bit for bit; resuming its sharded checkpoint on 1 process (2 -> 1), and
#       a 1-process checkpoint on 2 ZeRO-1 ranks (1 -> 2), continue with the unbroken run's
#       losses within 1e-5 (the global batch kept: 1 x 8 rows = 2 x 4 rows);
#   (h) an out-of-memory error (injected: FP8TRAIN_TEST_OOM) is exit 2 with the memory estimate
#       and the levers, no stack trace;
#   (f) a rank killed mid-run makes the other exit at once with an error (exit 3).
# Launched by torchrun when the project's Python has it, and by hand (RANK, WORLD_SIZE, ...).
source "$(dirname "$0")/lib.sh"

TORCHRUN=""
for t in "$FP8T_SOURCE_DIR/.venv/bin/torchrun" "$(command -v torchrun || true)"; do
  if [ -n "$t" ] && [ -x "$t" ]; then TORCHRUN=$t; break; fi
done

# fp32 unless a run says fp8 (configs/default.yaml trains in fp8; the 1e-5 tolerances are fp32's).
common=(--config "$CONFIG" --precision fp32 --out-dir "$WORK/runs" --quiet --steps 8 --set train.warmup_steps=2
        --set train.log_interval=1 --set train.eval_interval=4 --set train.eval_batches=2)

# fp32: by hand, 2 ranks x 4 rows against 1 process x 8 rows.
OMP_NUM_THREADS=1 "$FP8TRAIN" "${common[@]}" --run-name one-fp32 --set train.micro_batch_size=8
launch_by_hand 2 "${common[@]}" --run-name two-fp32 --set train.micro_batch_size=4 || {
  cat rank*.log; fail "fp32 data-parallel run failed"; }
relclose runs/two-fp32/metrics.jsonl runs/one-fp32/metrics.jsonl 1e-5 || fail "fp32: losses differ"
[ "$(json_get runs/two-fp32/summary.json 'd["world_size"]')" = 2 ] || fail "summary world_size"
[ "$(json_get runs/two-fp32/summary.json 'd["tokens"]')" = "$(json_get runs/one-fp32/summary.json 'd["tokens"]')" ] \
  || fail "global token count differs"

# fp8 (CPU emulation), through torchrun when available.
fp8=(--precision fp8 --set train.micro_batch_size=4)
OMP_NUM_THREADS=1 "$FP8TRAIN" "${common[@]}" --run-name one-fp8 --precision fp8 --set train.micro_batch_size=8
if [ -n "$TORCHRUN" ]; then
  "$TORCHRUN" --nproc-per-node 2 --master-port "$(free_port)" --no-python "$FP8TRAIN" "${common[@]}" \
    --run-name two-fp8 "${fp8[@]}" > torchrun.log 2>&1 || { cat torchrun.log; fail "torchrun fp8 run failed"; }
else
  echo "torchrun not found: launching by hand"
  launch_by_hand 2 "${common[@]}" --run-name two-fp8 "${fp8[@]}" || { cat rank*.log; fail "fp8 run failed"; }
fi
relclose runs/two-fp8/metrics.jsonl runs/one-fp8/metrics.jsonl 2e-2 || fail "fp8: losses differ"
python3 - runs/two-fp8/metrics.jsonl <<'PY' || fail "fp8 scales differ across ranks"
import json, sys
spreads = [r["fp8_scale_spread_across_ranks"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(spreads) == 8 and all(s == 0.0 for s in spreads), spreads
print(f"fp8 scales identical on both ranks at all {len(spreads)} steps")
PY

# ZeRO-1 in fp8 against DDP, without clipping (the clip norm is summed in another order, and
# FP8 rounding amplifies that last bit): the same losses bit for bit, identical scales.
launch_by_hand 2 "${common[@]}" --run-name ddp-fp8 "${fp8[@]}" --set train.grad_clip=0 || { cat rank*.log; fail "DDP fp8 run failed"; }
launch_by_hand 2 "${common[@]}" --run-name zero-fp8 "${fp8[@]}" --set train.grad_clip=0 --zero 1 \
  || { cat rank*.log; fail "ZeRO-1 fp8 run failed"; }
diff <(losses runs/ddp-fp8/metrics.jsonl) <(losses runs/zero-fp8/metrics.jsonl) || fail "ZeRO-1 fp8: losses differ from DDP"
python3 - runs/zero-fp8/metrics.jsonl <<'PY' || fail "ZeRO-1: fp8 scales differ across ranks"
import json, sys
spreads = [r["fp8_scale_spread_across_ranks"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(spreads) == 8 and all(s == 0.0 for s in spreads), spreads
print(f"ZeRO-1: fp8 scales identical on both ranks at all {len(spreads)} steps")
PY
rm -rf runs/ddp-fp8 runs/zero-fp8

# Only rank 0 wrote, into one folder, the same files as a single process.
[ "$(ls runs | sort | tr '\n' ' ')" = "one-fp32 one-fp8 two-fp32 two-fp8 " ] || fail "unexpected run folders: $(ls runs)"
diff <(ls runs/one-fp8) <(ls runs/two-fp8) || fail "the data-parallel run folder holds different files"
[ "$(grep -c '"loss"' runs/two-fp8/metrics.jsonl)" = 8 ] || fail "metrics.jsonl written more than once per step"

# Stop after 3 steps and resume: the same losses as the uninterrupted two-rank fp32 run.
launch_by_hand 2 "${common[@]}" --run-name split-fp32 --set train.micro_batch_size=4 --stop-after 3 \
  || { cat rank*.log; fail "stop-after run failed"; }
[ "$(json_get runs/split-fp32/summary.json 'd["status"]')" = stopped ] || fail "stop-after status"
launch_by_hand 2 "${common[@]}" --run-name split-fp32 --set train.micro_batch_size=4 --resume \
  || { cat rank*.log; fail "resumed run failed"; }
diff <(losses runs/two-fp32/metrics.jsonl) <(losses runs/split-fp32/metrics.jsonl) \
  || fail "the resumed two-rank loss sequence differs"
rm -rf runs/split-fp32

# ZeRO-1: against one process, then stop/resume on 2 ranks (bit for bit) and resharding.
launch_by_hand 2 "${common[@]}" --run-name zero-fp32 --set train.micro_batch_size=4 --zero 1 \
  || { cat rank*.log; fail "ZeRO-1 run failed"; }
relclose runs/zero-fp32/metrics.jsonl runs/one-fp32/metrics.jsonl 1e-5 || fail "ZeRO-1: losses differ from one process"
launch_by_hand 2 "${common[@]}" --run-name zsplit --set train.micro_batch_size=4 --zero 1 --stop-after 3 \
  || { cat rank*.log; fail "ZeRO-1 stop-after run failed"; }
ls runs/zsplit/checkpoint.shard-0-of-2.step-3.pt runs/zsplit/checkpoint.shard-1-of-2.step-3.pt > /dev/null \
  || fail "ZeRO-1: no shard files: $(ls runs/zsplit)"
[ "$(json_get runs/zsplit/summary.json 'd["status"]')" = stopped ] || fail "ZeRO-1 stop-after status"
cp -r runs/zsplit runs/zsplit-to1
launch_by_hand 2 "${common[@]}" --run-name zsplit --set train.micro_batch_size=4 --zero 1 --resume \
  || { cat rank*.log; fail "ZeRO-1 resumed run failed"; }
diff <(losses runs/zero-fp32/metrics.jsonl) <(losses runs/zsplit/metrics.jsonl) \
  || fail "the resumed ZeRO-1 loss sequence differs"
[ "$(ls runs/zsplit | grep -c 'checkpoint.shard-')" = 4 ] || fail "stale shard files kept: $(ls runs/zsplit)"
OMP_NUM_THREADS=1 "$FP8TRAIN" "${common[@]}" --run-name zsplit-to1 --set train.micro_batch_size=8 --resume \
  > to1.log 2>&1 || { cat to1.log; fail "resharding 2 -> 1 failed"; }
grep -q "resharding the checkpoint of 2 rank(s) (ZeRO-1) onto 1 rank(s)" runs/zsplit-to1/train.log || fail "no resharding line"
relclose runs/zsplit-to1/metrics.jsonl runs/zero-fp32/metrics.jsonl 1e-5 || fail "2 -> 1: losses differ"
OMP_NUM_THREADS=1 "$FP8TRAIN" "${common[@]}" --run-name split-to2 --set train.micro_batch_size=8 --stop-after 3
launch_by_hand 2 "${common[@]}" --run-name split-to2 --set train.micro_batch_size=4 --zero 1 --resume \
  || { cat rank*.log; fail "resharding 1 -> 2 failed"; }
relclose runs/split-to2/metrics.jsonl runs/one-fp32/metrics.jsonl 1e-5 || fail "1 -> 2: losses differ"
rm -rf runs/zero-fp32 runs/zsplit runs/zsplit-to1 runs/split-to2

# Out of memory (injected where a CUDA allocation fails: building the model, the first step).
for point in build step; do
  set +e
  FP8TRAIN_TEST_OOM=$point "$FP8TRAIN" "${common[@]}" --run-name oom-$point --zero 1 > oom.log 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] || { cat oom.log; fail "OOM at $point: expected exit 2, got $rc"; }
  for want in "out of memory while" "bytes/parameter" dist.zero train.recompute train.micro_batch_size; do
    grep -q "$want" oom.log || { cat oom.log; fail "OOM at $point: the message lacks '$want'"; }
  done
  ! grep -q "Exception raised from\|frame #" oom.log || { cat oom.log; fail "OOM at $point: a stack trace"; }
done
rm -rf runs/oom-build runs/oom-step

# A rank that never arrives: rank 0 of 2 alone fails with a clear error after the timeout.
set +e
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
  timeout 120 "$FP8TRAIN" "${common[@]}" --run-name lonely --set dist.timeout_s=3 > lonely.log 2>&1
rc=$?
set -e
[ "$rc" = 3 ] || { cat lonely.log; fail "a missing rank should fail with exit 3, got $rc"; }
grep -q "could not join the data-parallel job" lonely.log || { cat lonely.log; fail "no clear error for a missing rank"; }
[ ! -e runs/lonely ] || fail "a failed rendezvous wrote a run folder"

# A rank killed mid-run: the other fails at once with exit 3, and the summary says so.
port=$(free_port)
dead=(--config "$CONFIG" --out-dir "$WORK/runs" --quiet --steps 100000 --set train.eval_interval=0 --run-name killed)
RANK=0 WORLD_SIZE=2 MASTER_PORT=$port OMP_NUM_THREADS=1 "$FP8TRAIN" "${dead[@]}" > killed0.log 2>&1 &
p0=$!
RANK=1 WORLD_SIZE=2 MASTER_PORT=$port OMP_NUM_THREADS=1 "$FP8TRAIN" "${dead[@]}" > killed1.log 2>&1 &
p1=$!
for _ in $(seq 600); do [ -s runs/killed/metrics.jsonl ] && break; sleep 0.1; done
[ -s runs/killed/metrics.jsonl ] || { cat killed0.log killed1.log; fail "the two-rank run did not start"; }
kill -9 "$p1"
set +e
wait "$p1" 2>/dev/null
timeout 60 tail --pid="$p0" -f /dev/null
wait "$p0"
rc=$?
set -e
[ "$rc" = 3 ] || { cat killed0.log; fail "surviving rank: expected exit 3, got $rc"; }
grep -q "another rank died, stopped or timed out" killed0.log || { cat killed0.log; fail "no clear error"; }
[ "$(json_get runs/killed/summary.json 'd["status"]')" = failed ] || fail "summary status after a rank died"
rm -rf runs/killed

# Bad launcher variables are bad input (exit 2), before anything is written.
set +e
RANK=2 WORLD_SIZE=2 MASTER_PORT=1234 "$FP8TRAIN" "${common[@]}" --run-name badrank > badrank.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "RANK=2 is not below WORLD_SIZE=2" badrank.log || { cat badrank.log; fail "bad RANK: rc $rc"; }
echo "ok"
