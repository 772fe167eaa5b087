#!/usr/bin/env bash
# Stop signals during a long step (lib/train/stop_signals.h); the step here takes tens of
# seconds (train.micro_batch_size raised on --resume, a 2048-token context), as a 65536-token
# context on the CPU takes minutes:
#   SIGTERM then SIGINT: exit 130 within seconds, without waiting for the step; the previous
#     checkpoint intact byte for byte, the folder's lock released, --resume continues from it;
#   one SIGTERM: the step finishes, a checkpoint of it is written, exit 130, status interrupted.
source "$(dirname "$0")/lib.sh"

LONG=(--quiet --steps 100 --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2
      --set model.seq_len=2048 --set train.warmup_steps=0 --set train.eval_interval=0 --set train.eval_batches=1
      --set train.log_interval=1 --set train.checkpoint_interval=1)
sig_run() { "$FP8TRAIN" --out-dir "$WORK/runs" --run-name sig "${LONG[@]}" "$@"; }
sum() { sha256sum "$1" | cut -d' ' -f1; }
now() { date +%s.%N; }
# start_long MICRO_BATCH: --resume in the background ($pid); returns once the run holds the
# folder's lock (its handlers are installed before), then gives the step a second to start.
start_long() {
  # fp8train itself in the background (not a function: $! would be a subshell's pid)
  "$FP8TRAIN" --out-dir "$WORK/runs" --run-name sig "${LONG[@]}" --resume --set train.micro_batch_size="$1" \
    > "$WORK/long.txt" 2>&1 &
  pid=$!
  for _ in $(seq 300); do [ "$(cat runs/sig/.fp8train.lock 2>/dev/null)" = "$pid" ] && break; sleep 0.1; done
  [ "$(cat runs/sig/.fp8train.lock 2>/dev/null)" = "$pid" ] || { cat "$WORK/long.txt" >&2; fail "the run did not start"; }
  sleep 1
}
# finish LIMIT_S: waits for $pid; its exit code in $rc, or 124 when it was still running after
# LIMIT_S (then it is killed: a hang fails the test instead of stalling it).
finish() {
  for _ in $(seq $(($1 * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  rc=0; wait "$pid" || rc=$?
  if [ "$rc" = 137 ]; then rc=124; fi
}
trap 'if [ -n "${pid:-}" ]; then kill -9 "$pid" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
# lock_free: nobody holds runs/sig/.fp8train.lock (a non-blocking exclusive flock succeeds).
lock_free() {
  python3 -c "import fcntl,sys; f=open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)" runs/sig/.fp8train.lock
}

expect_rc 0 "two short steps" sig_run --set train.micro_batch_size=1 --stop-after 2
before=$(sum runs/sig/checkpoint.pt)

# ---- SIGTERM, then SIGINT: out at once ------------------------------------------------------------
start_long 400  # about 24 s per step here
kill -TERM "$pid"
sleep 1
kill -0 "$pid" 2>/dev/null || { cat "$WORK/long.txt" >&2; fail "one SIGTERM ended the run before its step finished"; }
t0=$(now)
kill -INT "$pid"
finish 10
took=$(python3 -c "print(f'{$(now) - $t0:.1f}')")
[ "$rc" = 130 ] || { cat "$WORK/long.txt" >&2; fail "second signal: exit $rc after ${took}s, expected 130 at once"; }
python3 -c "import sys; sys.exit(0 if $took < 5 else 1)" || fail "second signal: exit took ${took}s (limit 5 s)"
grep -q "second stop signal: exiting now (130)" "$WORK/long.txt" || { cat "$WORK/long.txt" >&2; fail "no message"; }
[ "$(sum runs/sig/checkpoint.pt)" = "$before" ] || fail "the checkpoint of step 2 changed"
lock_free || fail "the run folder's lock is still held"
expect_rc 0 "--resume after the second signal" sig_run --resume --set train.micro_batch_size=1 --stop-after 1
[ "$(json_get runs/sig/summary.json 'd["steps"]')" = 3 ] || fail "the resume did not continue from step 2"
echo "second signal: exit 130 after ${took}s (script ${SECONDS}s)"

# ---- one SIGTERM: the step finishes, its checkpoint is written ---------------------------------
before=$(sum runs/sig/checkpoint.pt)
start_long 64  # about 3 s per step here
kill -TERM "$pid"
finish 120
[ "$rc" = 130 ] || { cat "$WORK/long.txt" >&2; fail "one SIGTERM: exit $rc, expected 130"; }
grep -q "the current step finishes" "$WORK/long.txt" || { cat "$WORK/long.txt" >&2; fail "no message"; }
[ "$(json_get runs/sig/summary.json 'd["status"]')" = interrupted ] || fail "one SIGTERM: not interrupted"
[ "$(json_get runs/sig/summary.json 'd["steps"]')" = 4 ] || fail "one SIGTERM: the step did not finish"
[ "$(sum runs/sig/checkpoint.pt)" != "$before" ] || fail "one SIGTERM: no checkpoint of step 4"
lock_free || fail "the run folder's lock is still held"
echo "one signal: the step finished, exit 130 with its checkpoint (script ${SECONDS}s)"
