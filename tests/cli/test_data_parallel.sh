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
#   (e) stop and resume with the same number of ranks continues bit for bit; another number is
#       refused;
#   (f) a rank killed mid-run makes the other exit at once with an error (exit 3).
# Launched by torchrun when the project's Python has it, and by hand (RANK, WORLD_SIZE, ...).
source "$(dirname "$0")/lib.sh"

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
# launch_by_hand NPROC ARGS...: one background process per rank with torchrun's variables.
launch_by_hand() {
  local n=$1; shift
  local port; port=$(free_port)
  local pids=() rc=0
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$FP8TRAIN" "$@" > "rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
TORCHRUN=""
for t in "$FP8T_SOURCE_DIR/.venv/bin/torchrun" "$(command -v torchrun || true)"; do
  if [ -n "$t" ] && [ -x "$t" ]; then TORCHRUN=$t; break; fi
done

common=(--config "$CONFIG" --out-dir "$WORK/runs" --quiet --steps 8 --set train.warmup_steps=2
        --set train.log_interval=1 --set train.eval_interval=4 --set train.eval_batches=2)
# relclose A B TOL: every line of A within TOL (relative) of the same line of B.
relclose() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def rows(path, key):
    return [r[key] for r in map(json.loads, open(path)) if key in r]
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for key in ("loss", "val_loss"):
    x, y = rows(a, key), rows(b, key)
    assert len(x) == len(y) and x, f"{key}: {len(x)} vs {len(y)} rows"
    worst = max(abs(p - q) / abs(q) for p, q in zip(x, y))
    print(f"{key}: {len(x)} rows, largest relative difference {worst:.2e} (tolerance {tol:g})")
    assert worst <= tol, f"{key} differs by {worst} > {tol}"
PY
}

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
set +e
OMP_NUM_THREADS=1 "$FP8TRAIN" "${common[@]}" --run-name split-fp32 --resume --steps 10 > oneresume.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "written by a job of 2 rank(s)" oneresume.log || { cat oneresume.log; fail "resume with another world size: rc $rc"; }
rm -rf runs/split-fp32

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
